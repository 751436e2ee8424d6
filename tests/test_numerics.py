"""engine.precision and engine.memory_format: NHWC convolutions give the contiguous run's parameters (up to the
convolution algorithm's reassociation); bf16-mixed computes forward passes in bf16 and keeps every state float32."""

import pytest
import torch

from conftest import TINY, compose
from conftest import make_sim, trained_sim

from fedbench.errors import ConfigError

CNN = (*TINY, "model=cnn_fmnist", "rounds=2")


def test_auto_memory_format_is_channels_last_for_cnns_on_cpu_only(tmp_path):
    assert make_sim(compose(*CNN), tmp_path / "a").module.numerics.memory_format == "channels_last"
    assert make_sim(compose(*TINY), tmp_path / "b").module.numerics.memory_format == "contiguous"


def test_channels_last_convolutions_see_nhwc_inputs_and_match_contiguous(tmp_path):
    nhwc = trained_sim(compose(*CNN, "engine.memory_format=channels_last"), tmp_path / "a")
    plain = trained_sim(compose(*CNN, "engine.memory_format=contiguous"), tmp_path / "b")
    assert torch.allclose(nhwc.x, plain.x, atol=1e-5, rtol=0), float((nhwc.x - plain.x).abs().max())
    assert nhwc.x.is_contiguous()
    seen = []
    convs = [m for m in nhwc.module.model.modules() if isinstance(m, torch.nn.Conv2d)]
    handles = [c.register_forward_hook(lambda m, a, out: seen.append((a[0].stride(1), out.stride(1)))) for c in convs]
    nhwc.round(2)
    for h in handles:
        h.remove()
    assert seen and all(s_in == 1 and s_out == 1 for s_in, s_out in seen)  # channel stride 1: NHWC in and out


def test_bf16_mixed_runs_forward_passes_in_bf16_and_keeps_float32_state(tmp_path):
    sim = trained_sim(compose(*CNN, "engine.precision=bf16-mixed", "algo=scaffold"), tmp_path / "bf16")
    ref = trained_sim(compose(*CNN, "algo=scaffold"), tmp_path / "fp32")
    assert not torch.equal(sim.x, ref.x)  # rounded forward passes: a different trajectory ...
    assert sim.evaluate()[0] == pytest.approx(ref.evaluate()[0], rel=0.05)  # ... to the same loss
    assert sim.x.dtype == torch.float32 and sim.module.flat.params.dtype == torch.float32
    dtypes = []
    linear = [m for m in sim.module.model.modules() if isinstance(m, torch.nn.Linear)][0]
    handle = linear.register_forward_hook(lambda m, a, out: dtypes.append(out.dtype))
    sim.round(2)
    handle.remove()
    assert dtypes and set(dtypes) == {torch.bfloat16}


def test_bf16_mixed_under_the_cohort_runner_matches_the_sequential_one(tmp_path):
    seq = trained_sim(compose(*TINY, "engine.precision=bf16-mixed", "engine.client_runner=thin"), tmp_path / "a")
    vec = trained_sim(compose(*TINY, "engine.precision=bf16-mixed", "engine.client_runner=vmap"), tmp_path / "b")
    assert torch.allclose(seq.x, vec.x, atol=1e-2, rtol=0)


@pytest.mark.parametrize("override, key", [("engine.precision=fp16", "engine.precision"),
                                           ("engine.precision=tf32", "engine.precision"),
                                           ("engine.memory_format=nchw", "engine.memory_format")])
def test_bad_numerics_are_refused_naming_the_key(tmp_path, override, key):
    with pytest.raises(Exception, match=key.replace(".", r"\.")) as err:
        trained_sim(compose(*TINY, override, "rounds=1"), tmp_path)
    assert err.type is ConfigError or "memory_format" in str(err.value)
