import numpy as np
import pytest
import torch

from fedbench.data.federated import build_federated
from fedbench.data.idx import read_idx, write_idx
from fedbench.data.partition import PARTITIONERS, dirichlet, iid
from fedbench.data.sources import load_fmnist
from fedbench.errors import DataUnavailableError
from fedbench.rng import numpy_rng

from conftest import compose, option
from conftest import write_fake_mnist


def _part(**kw):
    base = dict(num_clients=20, alpha=0.3, min_samples=5, max_tries=100)
    base.update(kw)
    return option(PARTITIONERS, "dirichlet", **base)


LABELS = np.repeat(np.arange(10), 200)


@pytest.mark.parametrize("fn", [iid, dirichlet])
def test_every_sample_assigned_exactly_once(fn):
    owner, _ = fn(LABELS, _part(), numpy_rng(0, "t"), None)
    assert owner.shape == LABELS.shape
    assert owner.min() == 0 and owner.max() == 19
    assert np.bincount(owner, minlength=20).sum() == len(LABELS)


def test_dirichlet_reproducible_by_seed_and_min_size():
    a, _ = dirichlet(LABELS, _part(), numpy_rng(1, "t"), None)
    b, _ = dirichlet(LABELS, _part(), numpy_rng(1, "t"), None)
    c, _ = dirichlet(LABELS, _part(), numpy_rng(2, "t"), None)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.bincount(a).min() >= 5


def _label_skew(owner):
    """Mean over clients of the fraction of the client's data in its largest class."""
    hist = np.zeros((owner.max() + 1, 10))
    np.add.at(hist, (owner, LABELS), 1)
    return float(np.mean(hist.max(1) / hist.sum(1)))


def test_dirichlet_skew_responds_to_alpha():
    skews = [_label_skew(dirichlet(LABELS, _part(alpha=a), numpy_rng(0, "t"), None)[0]) for a in (0.05, 1.0, 100.0)]
    assert skews[0] > skews[1] > skews[2]
    assert skews[2] < 0.25  # near-IID at alpha=100 (10 classes: 0.1 is perfectly uniform)
    assert skews[0] > 0.6


def test_idx_roundtrip(tmp_path):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    for name in ("a-idx3-ubyte", "b-idx3-ubyte.gz"):
        write_idx(tmp_path / name, arr)
        assert np.array_equal(read_idx(tmp_path / name), arr)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError):
        read_idx(tmp_path / "bad")


@pytest.mark.parametrize("gz", [True, False])
def test_fmnist_loader_on_written_idx_files(tmp_path, gz):
    arrays = write_fake_mnist(tmp_path / "FashionMNIST" / "raw", gz=gz)
    cfg = compose("dataset=fmnist", "dataset.system_dirs=[]").dataset
    data = load_fmnist(cfg, tmp_path, 0)
    assert data.x_train.shape == (60, 1, 28, 28) and data.x_test.shape == (20, 1, 28, 28)
    assert torch.equal(data.y_train, torch.from_numpy(arrays["train-labels-idx1-ubyte"].astype(np.int64)))
    raw = torch.from_numpy(arrays["train-images-idx3-ubyte"][0].astype(np.float32) / 255)
    mean, std = data.x_train.mean(), data.x_train.std()  # normalize=own: the training split's own statistics
    assert abs(float(mean)) < 1e-5 and abs(float(std) - 1) < 1e-4
    raw_all = torch.from_numpy(arrays["train-images-idx3-ubyte"].astype(np.float32) / 255)
    assert torch.allclose(data.pad_fill, -raw_all.mean() / raw_all.std(), atol=1e-4)  # a black pixel, normalized
    mnist_norm = load_fmnist(compose("dataset=fmnist", "dataset.normalize=mnist").dataset, tmp_path, 0)
    assert torch.allclose(mnist_norm.x_train[0, 0], (raw - 0.1307) / 0.3081, atol=1e-6)


def test_own_normalization_does_not_depend_on_the_thread_count():
    """torch splits a reduction among its threads and the split changes the last bits of a sum; the statistics of
    normalize=own are taken on one thread, so a job's data does not depend on the thread count its process had
    before it (a launcher's reused worker after a job with another engine.num_threads, loky's OMP_NUM_THREADS)."""
    from fedbench.data.sources import DatasetConfig, normalized

    x = torch.rand(1000, 1, 28, 28, generator=torch.Generator().manual_seed(0))  # large enough to be split
    before, outs = torch.get_num_threads(), []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            data = normalized("x", x, None, x[:2], None, 10, DatasetConfig(name="x"))
            outs.append((data.x_train, data.pad_fill))
            assert torch.get_num_threads() == threads  # the process's count is left as it was
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) and torch.equal(fa, fb) for (a, fa), (b, fb) in zip(outs, outs[1:]))


def test_fmnist_missing_names_the_files(tmp_path):
    cfg = compose("dataset=fmnist", "dataset.system_dirs=[]").dataset
    with pytest.raises(DataUnavailableError, match="train-images-idx3-ubyte.*FashionMNIST/raw"):
        load_fmnist(cfg, tmp_path, 0)


def test_fmnist_real_files_when_present(tmp_path):
    cfg = compose("dataset=fmnist").dataset
    if not any(__import__("pathlib").Path(d).is_dir() for d in cfg.system_dirs):
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    data = load_fmnist(cfg, tmp_path, 0)
    assert data.x_train.shape == (60000, 1, 28, 28) and data.x_test.shape == (10000, 1, 28, 28)
    assert np.array_equal(np.bincount(data.y_train.numpy()), np.full(10, 6000))
    assert abs(float(data.x_train.mean())) < 1e-3 and abs(float(data.x_train.std()) - 1) < 1e-2


def test_federated_data_sorted_by_client_and_cached(tmp_path):
    cfg = compose("dataset=digits", "partition=dirichlet", "partition.num_clients=10", "partition.alpha=0.5")
    a = build_federated(cfg.dataset, cfg.partition, tmp_path, 0, cache=True)
    cached = list((tmp_path / "cache" / "partitions").glob("*.npz"))
    assert len(cached) == 1 and cached[0].stem == a.partition_hash
    b = build_federated(cfg.dataset, cfg.partition, tmp_path, 0, cache=True)
    assert torch.equal(a.x, b.x) and a.partition_hash == b.partition_hash
    c = build_federated(cfg.dataset, cfg.partition, tmp_path, 1, cache=True)
    assert c.partition_hash != a.partition_hash
    assert a.sizes.sum() == len(a.y) and a.label_hist.sum() == len(a.y)
    for i in range(a.num_clients):  # each slice holds exactly its histogram
        ys = a.y[a.offsets[i]:a.offsets[i + 1]].numpy()
        assert np.array_equal(np.bincount(ys, minlength=10), a.label_hist[i])


def test_client_batches_cover_client_without_replacement(tmp_path):
    cfg = compose("dataset=digits", "partition=iid", "partition.num_clients=10")
    data = build_federated(cfg.dataset, cfg.partition, tmp_path, 0, cache=False)
    n0 = int(data.sizes[0])
    gen = torch.Generator().manual_seed(0)
    batches = data.client_batches(0, steps=n0 // 4, batch_size=4, gen=gen)
    xs = torch.cat([b[0] for b in batches])
    rows = {tuple(r.flatten().tolist()) for r in xs}
    assert len(rows) == (n0 // 4) * 4  # an epoch samples without replacement


def test_synthetic_natural_split(tmp_path):
    cfg = compose("dataset=synthetic", "partition=natural", "dataset.num_users=12")
    data = build_federated(cfg.dataset, cfg.partition, tmp_path, 0, cache=False)
    assert data.num_clients == 12 and data.input_shape == (60,)
    assert (data.sizes >= 1).all()


def test_validation_split_is_stratified_and_leaves_the_test_set_alone(tmp_path):
    from fedbench.data.sources import DATASETS

    cfg = compose("dataset=digits", "partition=iid", "partition.num_clients=10")
    central = DATASETS["digits"](cfg.dataset, tmp_path, 0)
    plain = build_federated(cfg.dataset, cfg.partition, tmp_path, 0, False)
    held = build_federated(cfg.dataset, cfg.partition, tmp_path, 0, False, val_fraction=0.1)
    assert plain.x_val is None
    labels = central.y_train.numpy()
    per_class = np.bincount(labels)
    assert np.array_equal(np.bincount(held.y_val.numpy(), minlength=10), np.round(0.1 * per_class).astype(int))
    assert held.y.numel() + held.y_val.numel() == labels.size  # clients hold the other ~90%
    assert abs(held.y.numel() / labels.size - 0.9) < 0.01
    assert torch.equal(held.x_test, plain.x_test) and torch.equal(held.y_test, plain.y_test)
    # validation rows are training rows that no client holds
    rows = {tuple(r) for r in central.x_train.flatten(1).numpy().round(5).tolist()}
    val_rows = {tuple(r) for r in held.x_val.flatten(1).numpy().round(5).tolist()}
    client_rows = {tuple(r) for r in held.x.flatten(1).numpy().round(5).tolist()}
    assert val_rows <= rows and not (val_rows & client_rows)
    again = build_federated(cfg.dataset, cfg.partition, tmp_path, 0, True, val_fraction=0.1)
    assert torch.equal(again.y_val, held.y_val) and torch.equal(again.y, held.y)  # one stream, reproducible


def test_validation_metrics_in_every_evaluation_and_the_summary(tiny_cfg, tmp_path):
    from conftest import csv_rows, run_resumable

    sim, summary = run_resumable(tiny_cfg("data.val_fraction=0.2"), tmp_path / "run", tmp_path / "data")
    rows = csv_rows(tmp_path / "run" / "metrics.csv")
    assert len(rows) == 2 and all(0 < float(r["val_acc"]) <= 1 and float(r["val_loss"]) > 0 for r in rows)
    assert summary["final_val_acc"] == float(rows[-1]["val_acc"])
    assert summary["best_val_acc"] == max(float(r["val_acc"]) for r in rows)
    assert sim.evaluate_val()[1] == summary["final_val_acc"]
    assert sim.data.y_val.numel() > 0 and sim.data.y.numel() + sim.data.y_val.numel() == 1797 - 359  # digits: all but its test share
    _, plain = run_resumable(tiny_cfg(), tmp_path / "plain", tmp_path / "data")
    assert plain["final_val_acc"] is None and "val_acc" not in csv_rows(tmp_path / "plain" / "metrics.csv")[0]
