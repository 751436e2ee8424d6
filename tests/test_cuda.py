"""The CUDA path (skipped without a GPU): a run on CUDA follows the CPU run's trajectory, the cohort runner on CUDA
equals the sequential one, the precisions and the evaluation batch behave as documented, and resume is exact."""

import json

import pytest
import torch

from conftest import TINY, compose
from conftest import trained_sim
from conftest import BASE, run_resumable as _run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

CUDA = "engine.device=cuda"
ALGOS = [("algo=fedavg",), ("algo=scaffold",), ("algo=mifa", "participation=markov"),
         ("algo=mimic", "participation=round_robin_dropout"), ("algo=gradma",), ("algo=fedamd",), ("algo=moon",),
         ("algo=amplified_fedavg", "algo.period=2", "algo.warmup_rounds=1", "algo.warmup_lr=0.3",
          "participation=periodic", "participation.availability.period=2")]


@pytest.mark.parametrize("overrides", ALGOS, ids=lambda o: o[0].split("=")[1])
def test_a_cuda_run_follows_the_cpu_run(tmp_path, tiny_cfg, overrides):
    cpu = trained_sim(tiny_cfg(*overrides), tmp_path / "cpu")
    gpu = trained_sim(tiny_cfg(*overrides, CUDA), tmp_path / "gpu")
    assert gpu.x.device.type == "cuda" and gpu.module.flat.params.device.type == "cuda"
    diff = float((gpu.x.cpu() - cpu.x).abs().max())
    assert diff < 1e-4, diff  # same minibatches and participation (counter-based streams); only kernels differ
    assert cpu.trainer.cost.totals() == gpu.trainer.cost.totals()
    assert gpu.evaluate()[1] == pytest.approx(cpu.evaluate()[1], abs=0.02)


CNN = (*TINY, "model=cnn_fmnist", "rounds=2")
COHORT = [(), ("algo=scaffold", "participation=straggler"), ("model=mlp_fedsrc",),
          ("model=mlp_784_200_100_10_bn", "dataset=synthetic", "dataset.dim=784"), ("model=cnn_fmnist", "rounds=2")]


@pytest.mark.parametrize("overrides", COHORT, ids=["logreg", "scaffold-straggler", "dropout", "bn", "cnn"])
def test_the_cohort_runner_on_cuda_equals_the_sequential_runner(tmp_path, tiny_cfg, overrides):
    seq = trained_sim(tiny_cfg(*overrides, CUDA, "engine.client_runner=thin"), tmp_path / "seq")
    vec = trained_sim(tiny_cfg(*overrides, CUDA, "engine.client_runner=vmap"), tmp_path / "vmap")
    assert seq.runner_kind == "thin" and vec.runner_kind == "vmap"
    assert torch.allclose(seq.x, vec.x, atol=1e-5, rtol=0), float((seq.x - vec.x).abs().max())
    assert torch.allclose(seq.buffers, vec.buffers, atol=1e-5, rtol=0)


def test_auto_batches_a_convolutional_model_on_cuda(tmp_path):
    sim = trained_sim(compose(*CNN, CUDA), tmp_path / "auto")  # on a CPU auto keeps it thin (test_cohort.py)
    assert sim.runner_kind == "vmap" and sim.cohort is not None, sim.runner_reason


def test_tf32_and_bf16_mixed_run_on_cuda_and_keep_float32_state(tmp_path):
    losses = {}
    for precision in ("tf32", "bf16-mixed", "fp32"):
        sim = trained_sim(compose(*CNN, CUDA, f"engine.precision={precision}"), tmp_path / precision)
        assert sim.x.dtype == torch.float32 and sim.x.device.type == "cuda"
        assert torch.backends.cuda.matmul.allow_tf32 is (precision == "tf32")  # set at each run's start
        losses[precision] = sim.evaluate()[0]
    assert losses["tf32"] == pytest.approx(losses["fp32"], rel=0.05)
    assert losses["bf16-mixed"] == pytest.approx(losses["fp32"], rel=0.05)


def test_cuda_defaults_evaluation_batch_and_contiguous_convolutions(tmp_path):
    sim = trained_sim(compose(*CNN, CUDA), tmp_path / "a")
    assert sim.eval_batch == 8192
    assert sim.module.numerics.memory_format == "contiguous"  # NHWC by default on CPU only


def test_resume_on_cuda_equals_uninterrupted(tmp_path):
    cfg = compose(*[o for o in BASE if not o.startswith("participation.")], "algo=mifa", "participation=markov", CUDA)
    data = tmp_path / "data"
    full, _ = _run(cfg, tmp_path / "full", data)
    _run(cfg, tmp_path / "part", data, stop_at=3)
    resumed, summary = _run(cfg, tmp_path / "part", data, resume=True)
    assert summary["status"] == "completed"
    assert torch.allclose(resumed.x, full.x, atol=1e-6, rtol=0)
    assert json.loads((tmp_path / "part" / "summary.json").read_text())["device"].startswith("cuda")
