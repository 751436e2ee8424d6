"""Datasets in their real on-disk formats, partitions, models and the papers' dataset x partition x model table."""

import numpy as np
import pytest
import torch

from fedbench.data.augment import crop_flip
from fedbench.data.federated import build_federated
from fedbench.data.partition import PARTITIONERS
from fedbench.data.sources import DATASETS
from fedbench.models import MODELS, build_model
from fedbench.rng import numpy_rng, torch_rng

from conftest import compose, option
from conftest import (check_evaluation, make_sim, write_fake_cifar, write_fake_dataset, write_fake_emnist, write_fake_leaf_femnist,
                     write_fake_svhn, write_fake_tiny_imagenet)


def _ds(name, *extra):
    return compose(f"dataset={name}", *extra).dataset


def test_emnist_idx_transposed(tmp_path):
    arrays = write_fake_emnist(tmp_path, "digits")
    data = DATASETS["emnist_digits"](_ds("emnist_digits", "dataset.normalize=none"), tmp_path, 0)
    raw = arrays["emnist-digits-train-images-idx3-ubyte"][3]
    assert torch.allclose(data.x_train[3, 0], torch.from_numpy(raw.T.astype(np.float32) / 255))
    assert data.num_classes == 10 and data.x_test.shape == (40, 1, 28, 28)


def test_leaf_femnist_writer_split(tmp_path):
    write_fake_leaf_femnist(tmp_path, writers=6, per_writer=20)
    data = DATASETS["emnist_balanced"](_ds("emnist_balanced", "dataset.writer_split=true"), tmp_path, 0)
    assert data.num_classes == 62 and data.x_train.shape == (120, 1, 28, 28)
    assert np.array_equal(np.bincount(data.natural_clients), np.full(6, 20))
    cfg = compose("dataset=emnist_balanced", "dataset.writer_split=true", "partition=natural")
    fed = build_federated(cfg.dataset, cfg.partition, tmp_path, 0, cache=False)
    assert fed.num_clients == 6


@pytest.mark.parametrize("hundred", [False, True])
def test_cifar_pickle_batches(tmp_path, hundred):
    write_fake_cifar(tmp_path, hundred=hundred)
    name = "cifar100" if hundred else "cifar10"
    data = DATASETS[name](_ds(name), tmp_path, 0)
    assert data.x_train.shape == (300, 3, 32, 32) and data.x_test.shape == (40, 3, 32, 32)
    assert data.num_classes == (100 if hundred else 10)
    per_channel = data.x_train.mean(dim=(0, 2, 3))
    assert torch.allclose(per_channel, torch.zeros(3), atol=1e-5)  # own per-channel statistics


def test_svhn_mat_label_ten_is_zero(tmp_path):
    write_fake_svhn(tmp_path)
    data = DATASETS["svhn"](_ds("svhn"), tmp_path, 0)
    assert data.x_train.shape == (300, 3, 32, 32)
    assert int(data.y_train[9]) == 0 and int(data.y_train[0]) == 1  # stored labels 10 and 1


@pytest.mark.parametrize("original", [True, False])
def test_tiny_imagenet_layouts(tmp_path, original):
    write_fake_tiny_imagenet(tmp_path, classes=4, per_class=5, original=original)
    data = DATASETS["tiny_imagenet"](_ds("tiny_imagenet"), tmp_path, 0)
    assert data.x_train.shape == (20, 3, 64, 64) and data.x_test.shape == (12, 3, 64, 64)
    assert np.array_equal(np.bincount(data.y_test.numpy()), [3, 3, 3, 3])


@pytest.mark.parametrize("name", ["mnist", "emnist_digits", "cifar10", "cifar100", "svhn", "tiny_imagenet"])
def test_missing_files_message(tmp_path, name):
    from fedbench.errors import DataUnavailableError

    with pytest.raises(DataUnavailableError, match="Fix: place"):
        DATASETS[name](_ds(name), tmp_path, 0)


def test_normalize_custom_and_mnist(tmp_path):
    write_fake_cifar(tmp_path)
    custom = DATASETS["cifar10"](_ds("cifar10", "dataset.normalize=custom", "dataset.mean=[0.5,0.5,0.5]",
                                    "dataset.std=[0.25,0.25,0.25]"), tmp_path, 0)
    plain = DATASETS["cifar10"](_ds("cifar10", "dataset.normalize=none"), tmp_path, 0)
    assert torch.allclose(custom.x_train, (plain.x_train - 0.5) / 0.25)
    from fedbench.errors import ConfigError

    with pytest.raises(ConfigError, match="dataset.mean"):
        DATASETS["cifar10"](_ds("cifar10", "dataset.normalize=custom", "dataset.mean=[0.5]", "dataset.std=[1.0]"),
                           tmp_path, 0)


def test_crop_flip():
    x = torch.arange(2 * 1 * 4 * 4, dtype=torch.float32).view(2, 1, 4, 4) + 1
    fill = torch.tensor([-7.0])
    gen = torch.Generator().manual_seed(0)
    for per_sample in (True, False):
        out = crop_flip(x, gen, fill, per_sample=per_sample, pad=2)
        assert out.shape == x.shape
        for b in range(2):  # every output pixel is an input pixel of the same image or the fill value
            vals = set(out[b].flatten().tolist())
            assert vals <= set(x[b].flatten().tolist()) | {-7.0}
    outs = {tuple(crop_flip(x[:1].expand(64, 1, 4, 4), gen, fill, per_sample=True, pad=2)[i].flatten().tolist())
            for i in range(64)}
    assert len(outs) > 5  # per-sample draws differ
    same = crop_flip(x[:1].expand(8, 1, 4, 4), gen, fill, per_sample=False, pad=2)
    assert all(torch.equal(same[0], same[i]) for i in range(8))  # batch-level: one draw for the batch


LABELS = np.repeat(np.arange(10), 120)


def _part(name, **kw):
    return option(PARTITIONERS, name, num_clients=20, **kw)


@pytest.mark.parametrize("name, kw", [
    ("iid", {}), ("dirichlet", {"alpha": 0.5, "min_samples": 5}), ("dirichlet", {"alpha": 0.5, "equal_sizes": True}),
    ("shards", {}), ("classes_per_client", {}), ("classes_per_client", {"scheme": "mimic", "max_per_client": 40}),
    ("majority_class", {}), ("quantity_skew", {"min_samples": 5}),
])
def test_partitions_assign_each_sample_at_most_once(name, kw):
    owner, attrs = PARTITIONERS[name](LABELS, _part(name, **kw), numpy_rng(0, "t"), None)
    assert owner.shape == LABELS.shape and owner.max() == 19 and owner.min() >= -1
    counts = np.bincount(owner[owner >= 0], minlength=20)
    assert (counts > 0).all()
    again, _ = PARTITIONERS[name](LABELS, _part(name, **kw), numpy_rng(0, "t"), None)
    assert np.array_equal(owner, again)


def _hist(owner):
    h = np.zeros((20, 10), dtype=int)
    np.add.at(h, (owner[owner >= 0], LABELS[owner >= 0]), 1)
    return h


def test_classes_per_client_schemes():
    owner, _ = PARTITIONERS["classes_per_client"](LABELS, _part("classes_per_client"), numpy_rng(0, "t"), None)
    h = _hist(owner)
    assert ((h > 0).sum(1) == 2).all()  # exactly 2 classes per client
    assert ((h > 0).sum(0) == 4).all()  # balanced: every label on 20*2/10 clients
    assert (owner >= 0).all() and len(set(h.sum(1))) == 1  # equal sizes
    owner, attrs = PARTITIONERS["classes_per_client"](
        LABELS, _part("classes_per_client", scheme="mimic", max_per_client=40), numpy_rng(0, "t"), None)
    h = _hist(owner)
    assert ((h > 0).sum(1) == 2).all() and (h.sum(1) <= 40).all()
    assert np.array_equal(attrs["majority_label"], np.arange(20) % 10)
    assert all(h[i, i % 10] > 0 for i in range(20))


def test_majority_class_split():
    labels = np.repeat(np.arange(10), 1000)
    rng = numpy_rng(1, "t")
    labels = labels[rng.permutation(len(labels))]
    cfg = option(PARTITIONERS, "majority_class", num_clients=50)
    owner, attrs = PARTITIONERS["majority_class"](labels, cfg, numpy_rng(0, "t"), None)
    h = np.zeros((50, 10), dtype=int)
    np.add.at(h, (owner, labels), 1)
    assert np.array_equal(attrs["majority_label"], np.repeat(np.arange(10), 5))
    frac = h[np.arange(50), attrs["majority_label"]] / h.sum(1)
    assert 0.93 < frac.mean() < 0.98  # ~95.5%: 5% random extras, a tenth of them of the client's own label
    assert h.sum(1).max() - h.sum(1).min() < 25  # the fewest-samples rule balances sizes


def test_dirichlet_equal_sizes_and_quantity_skew():
    owner, _ = PARTITIONERS["dirichlet"](LABELS, _part("dirichlet", alpha=0.1, equal_sizes=True), numpy_rng(0, "t"),
                                         None)
    assert np.array_equal(np.bincount(owner[owner >= 0]), np.full(20, 60))
    owner, _ = PARTITIONERS["quantity_skew"](LABELS, _part("quantity_skew", sigma=1.5, min_samples=5),
                                             numpy_rng(0, "t"), None)
    sizes = np.bincount(owner)
    assert (owner >= 0).all() and sizes.min() >= 5 and sizes.max() > 3 * np.median(sizes)


PARAMS = [
    ("lenet5", {}, (1, 28, 28), 10, 44_426),
    ("cnn_fmnist", {}, (1, 28, 28), 10, 228_586),
    ("cnn_cifar", {}, (3, 32, 32), 10, 2_218_314),
    ("mlp", {"hidden": [100]}, (1, 28, 28), 10, 79_510),
    ("mlp", {"hidden": [200, 100], "batch_norm": True}, (1, 28, 28), 10, 178_710),
    ("gradma_cnn", {}, (3, 32, 32), 10, 941_834),
    ("vgg11", {"norm": "none", "variant": "mimic"}, (3, 32, 32), 10, 9_750_922),
    ("resnet20", {}, (3, 32, 32), 10, 269_722),
    ("resnet18", {}, (3, 32, 32), 10, 11_173_962),
]


@pytest.mark.parametrize("name, kw, shape, classes, count", PARAMS)
def test_model_parameter_counts(name, kw, shape, classes, count):
    cfg = option(MODELS, name, **kw)
    model = build_model(cfg, shape, classes, torch_rng(0, "init"))
    assert sum(p.numel() for p in model.parameters()) == count
    assert model(torch.randn(2, *shape)).shape == (2, classes)


@pytest.mark.parametrize("norm", ["batch", "group", "none"])
def test_resnet_norm_switch(norm):
    cfg = option(MODELS, "resnet20", norm=norm)
    model = build_model(cfg, (3, 32, 32), 10, torch_rng(0, "init"))
    kinds = {type(m).__name__ for m in model.modules()}
    assert ({"batch": "BatchNorm2d", "group": "GroupNorm"}.get(norm, "Identity")) in kinds


# The README's table: every dataset x partition x model the papers use, and the line that selects it.
PAPER_ROWS = {
    "wang22_fmnist": "dataset=fmnist dataset.normalize=mnist partition=majority_class model=cnn_fmnist",
    "wang22_cifar10": "dataset=cifar10 dataset.augment=batch_level dataset.normalize=custom "
                      "dataset.mean=[0.4914,0.4822,0.4465] dataset.std=[0.2023,0.1994,0.2010] "
                      "partition=majority_class model=cnn_cifar",
    "fedamd_fmnist": "dataset=fmnist dataset.normalize=mnist partition=classes_per_client model=lenet5",
    "fedamd_emnist": "dataset=emnist_digits dataset.normalize=none partition=classes_per_client model=mlp_784_100_10",
    "gradma_mnist": "dataset=mnist dataset.normalize=mnist partition=dirichlet partition.alpha=0.1 "
                    "partition.min_samples=2 model=mlp_784_200_100_10_bn",
    "gradma_cifar10": "dataset=cifar10 partition=dirichlet partition.alpha=0.1 partition.min_samples=2 "
                      "model=gradma_cnn",
    "gradma_cifar100": "dataset=cifar100 partition=dirichlet partition.alpha=0.1 partition.min_samples=2 "
                       "model=vgg11_gradma",
    "gradma_tiny": "dataset=tiny_imagenet partition=dirichlet partition.alpha=0.1 partition.min_samples=2 "
                   "model=resnet20",
    "mimic_fmnist": "dataset=fmnist dataset.normalize=none partition=classes_per_client partition.scheme=mimic "
                    "partition.num_clients=30 partition.max_per_client=2000 model=lenet5",
    "mimic_cifar10": "dataset=cifar10 partition=classes_per_client partition.scheme=mimic partition.num_clients=30 "
                     "partition.max_per_client=2000 model=vgg11",
    "fedsrc_fmnist": "dataset=fmnist partition=dirichlet partition.equal_sizes=true partition.alpha=0.1 "
                     "partition.num_clients=300 model=mlp model.hidden=[64]",
    "fedsrc_cifar10": "dataset=cifar10 partition=dirichlet partition.equal_sizes=true partition.alpha=0.5 "
                      "partition.num_clients=300 model=resnet18 model.stem=imagenet",
    "fedprox_synthetic": "dataset=synthetic dataset.alpha=1 dataset.beta=1 partition=natural model=logreg",
    "femnist_writers": "dataset=emnist_balanced dataset.writer_split=true partition=natural model=lenet5",
    "svhn_extension": "dataset=svhn partition=dirichlet model=resnet20 model.norm=group",
}


@pytest.mark.parametrize("row", sorted(PAPER_ROWS))
def test_paper_rows_run_at_tiny_scale(row, tmp_path):
    line = PAPER_ROWS[row].split()
    dataset = next(a.split("=")[1] for a in line if a.startswith("dataset="))
    write_fake_dataset(dataset, tmp_path / "data")
    tiny = ["rounds=1", "client.local_steps=1", "client.batch_size=4", "participation.selection.clients_per_round=2"]
    if "partition=natural" in line:
        tiny += ["dataset.num_users=5"] if dataset == "synthetic" else []
    else:
        line = [a for a in line if not a.startswith(("partition.num_clients", "partition.max_per_client"))]
        tiny += ["partition.num_clients=10"]
    cfg = compose(*line, *tiny, "dataset.system_dirs=[]" if dataset in ("fmnist",) else "logger=none")
    sim = make_sim(cfg, tmp_path, root=tmp_path / "data")
    before = sim.x.clone()
    sim.round(0)
    assert torch.isfinite(sim.x).all() and not torch.equal(before, sim.x)
    loss, _ = check_evaluation(sim)
    assert np.isfinite(loss)
