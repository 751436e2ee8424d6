"""engine.workers=k: the round's clients trained in k one-thread processes give the one-process thin runner's
parameters, buffers and costs exactly (the main process keeps the aggregation order); what cannot be shipped to a
worker is refused at start, and a worker that dies is reported, not waited for."""

import os
import signal

import pytest
import torch

from conftest import TINY, compose
from conftest import make_sim, trained_sim

from fedbench.errors import ConfigError

CASES = [
    ("algo=scaffold", "participation=straggler", "client.momentum=0.5"),  # affine hooks, ragged steps, momentum
    ("model=mlp", "model.batch_norm=true", "model.hidden_dropout=0.3", "participation/selection=md",
     "participation.selection.replacement=true", "client.grad_noise=0.1"),  # BN, dropout, repeats, noise
]


@pytest.mark.parametrize("overrides", CASES, ids=["scaffold-straggler", "bn-dropout-repeats-noise"])
def test_workers_equal_the_one_process_thin_runner(tmp_path, overrides):
    base = [o for o in TINY if not (o.startswith("participation.") and any(x.startswith("participation=")
                                                                           for x in overrides))]
    one = trained_sim(compose(*base, *overrides, "engine.num_threads=1", "engine.client_runner=thin"),
                      tmp_path / "one")
    many = trained_sim(compose(*base, *overrides, "engine.workers=2"), tmp_path / "many")
    try:
        assert many.runner_kind == "thin x 2 workers"
        hooked = any(o.startswith("algo=") for o in overrides)  # affine form of a hook: reassociated sums
        close = (lambda a, b: torch.allclose(a, b, atol=1e-6, rtol=0)) if hooked else torch.equal
        assert close(one.x, many.x) and close(one.buffers, many.buffers), float((one.x - many.x).abs().max())
        assert one.trainer.cost.totals() == many.trainer.cost.totals()
        assert one.round(4).train_loss == pytest.approx(many.round(4).train_loss, abs=1e-6)
    finally:
        many.close()


@pytest.mark.parametrize("overrides, why", [
    (("algo=gradma",), "not affine"),
    (("engine.client_runner=vmap",), "engine.client_runner=vmap"),
])
def test_what_workers_cannot_run_is_refused_at_start(tmp_path, overrides, why):
    with pytest.raises(ConfigError, match=f"engine.workers.*{why}"):
        make_sim(compose(*TINY, *overrides, "engine.workers=2"), tmp_path)


def test_a_dead_worker_is_reported(tmp_path):
    sim = make_sim(compose(*TINY, "engine.workers=2"), tmp_path)
    try:
        os.kill(sim.cohort.procs[0].pid, signal.SIGKILL)
        sim.cohort.procs[0].join()
        with pytest.raises(RuntimeError, match="worker process exited"):
            for t in range(3):
                sim.round(t)
    finally:
        sim.close()
