"""What trains clients, built the same way in the main process and in each ``engine.workers`` process: the
federated data, the checked model, its ``LocalModule`` with the run's numerics, the client runner and the
``ClientTrainer`` (same data, initial model and streams), plus the device and thread rules of the run."""

from __future__ import annotations

import json
import weakref
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from fedbench.config.launchers import cores
from fedbench.config.schema import NoiseSpread
from fedbench.data import FederatedData, build_federated
from fedbench.errors import ConfigError, FedbenchError, require
from fedbench.models import build_model
from fedbench.rng import numpy_rng, torch_rng
from fedbench.training.local import LocalModule
from fedbench.training.numerics import Numerics
from fedbench.training.runners import make_runner
from fedbench.training.trainer import ClientTrainer


def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("engine.device", f"'{spec}' was asked for but no CUDA device is visible.",
                          "use engine.device=cpu (or auto).")
    if spec.startswith("cuda:") and int(spec[5:]) >= torch.cuda.device_count():
        raise ConfigError("engine.device", f"'{spec}' was asked for but only {torch.cuda.device_count()} CUDA "
                          "device(s) are visible.", "use cuda:0 .. cuda:N-1, or auto.")
    if spec == "mps" and not (torch.backends.mps.is_available()):
        raise ConfigError("engine.device", "'mps' was asked for but this machine has no Apple MPS device.",
                          "use engine.device=cpu (or auto).")
    try:
        return torch.device(spec)
    except RuntimeError:
        raise ConfigError("engine.device", f"'{spec}' is not a device.", "use cpu, cuda, cuda:N or auto.") from None


#: Local-step work (parameters x batch x clients stepped together) from which torch uses every core; below it one
#: thread is faster (measured on a 2-core machine: the W2 logistic regression, 7.8e4, is 7% faster on one thread;
#: the W1 CNN, 3.7e6, 1.65x faster on two; W2 under the cohort runner, 7.8e6, 1.2x faster on two).
THREADS_WORK = 2_000_000

#: ``engine.eval_batch_size=0``: evaluation batch by device. On CPU, evaluation of the W1 CNN on the 10k test images
#: took 4.0 s at 256 and 5.6 s at 2048 (one thread; two threads: 2.4 s vs 3.1 s); a GPU wants large batches.
EVAL_BATCH = {"cpu": 256, "cuda": 8192}


def auto_threads(dim: int, batch: int, cohort: int) -> int:
    """``engine.num_threads=0``: one thread for small local steps, every available core above ``THREADS_WORK``."""
    return cores() if dim * batch * cohort >= THREADS_WORK else 1


def cpu_description() -> dict:
    """The CPU a run computed on, for ``summary.json``: its model (``/proc/cpuinfo``, else ``platform.processor``)
    and the SIMD kernels torch dispatches to (``torch.backends.cpu.get_cpu_capability``). Results are bit-identical
    on one machine; between CPUs whose kernels differ they may differ in the last bits, and a chaotic run (a large
    step) then ends elsewhere."""
    import platform

    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {"model": model or platform.processor() or platform.machine(),
            "capability": torch.backends.cpu.get_cpu_capability(), "cores": cores()}


def clients_per_round(cfg: DictConfig, n: int) -> int:
    s = OmegaConf.select(cfg, "participation.selection.clients_per_round")
    return int(s) if s else n


def noise_levels(cfg: DictConfig, n: int, data_seed: int):
    """Each client's injected gradient-noise std s_i (None without noise): grad_noise x u_i, u_i ~ U(0, 1) from
    the stream (data seed, "grad_noise/levels"), or grad_noise for all (``grad_noise_spread``)."""
    nu = cfg.client.grad_noise
    if nu == 0:
        return None
    if NoiseSpread(cfg.client.grad_noise_spread) == NoiseSpread.constant:
        return np.full(n, float(nu))
    return nu * numpy_rng(data_seed, "grad_noise/levels").random(n)


#: the federated data of the runs alive in this process, by what determines it (weak: freed with its last run)
_SHARED: "weakref.WeakValueDictionary[str, FederatedData]" = weakref.WeakValueDictionary()


def shared_data(cfg: DictConfig, root: Path, device: torch.device, data_seed: int) -> FederatedData:
    """The run's federated data, on ``device``. Runs alive in one process at the same time (the jobs of a packed
    sweep) with the same dataset, partition, data seed, validation share and device share one copy: nothing writes
    into a ``FederatedData`` once built, and a pack of 4 learning rates x 2 seeds then holds 2 copies, not 8."""
    plain = lambda node: OmegaConf.to_container(node, resolve=True, enum_to_str=True)  # noqa: E731
    key = json.dumps([plain(cfg.dataset), plain(cfg.partition), str(Path(root).resolve()), int(data_seed),
                      float(cfg.data.val_fraction), str(device)], sort_keys=True)
    data = _SHARED.get(key)
    if data is None:
        data = build_federated(cfg.dataset, cfg.partition, root, data_seed, cfg.data.cache, cfg.data.val_fraction)
        _SHARED[key] = data.to(device)
    return data


def local_stack(cfg: DictConfig, root: Path, device: torch.device, warn: bool = False) -> tuple:
    """(federated data, ``LocalModule``, ``ClientTrainer``) of a run: what trains clients, built the same way in the
    main process and in each ``engine.workers`` process (same data, initial model and streams)."""
    data_seed = cfg.seed if cfg.data.seed is None else cfg.data.seed
    data = shared_data(cfg, root, device, data_seed)
    smallest = int(data.sizes.min())
    if warn and cfg.client.batch_size > smallest:
        print(f"fedbench: warning: client.batch_size={cfg.client.batch_size} exceeds the smallest client's "
              f"{smallest} samples; such clients use batches of all their data (full-batch steps)", flush=True)
    model = _checked_model(cfg, data, device)
    module = LocalModule(model, cfg.client.lr, cfg.client.momentum, cfg.client.weight_decay)
    require(cfg.engine.precision != "tf32" or device.type == "cuda", "engine.precision",
            f"tf32 is a CUDA tensor-core mode and this run is on {device}.", "use fp32 or bf16-mixed.")
    module.set_numerics(Numerics(device, cfg.engine.precision, cfg.engine.memory_format.value))
    kind = cfg.engine.client_runner.value
    runner = make_runner("thin" if kind in ("vmap", "auto") else kind, module, device)
    noise = noise_levels(cfg, data.num_clients, data_seed)
    trainer = ClientTrainer(data, runner, cfg.seed, cfg.client.batch_size, noise)
    return data, module, trainer


def _checked_model(cfg: DictConfig, data: FederatedData, device: torch.device) -> torch.nn.Module:
    """The model, checked on two training inputs (eval mode, no state changes): a model that cannot take the
    dataset's input shape is a config error named at start, not a crash in the first round."""
    try:
        model = build_model(cfg.model, data.input_shape, data.num_classes, torch_rng(cfg.seed, "init"))
        model.to(device).eval()
        with torch.no_grad():
            out = model(data.x[:2])
        model.train()
        ok = tuple(out.shape) == (min(2, len(data.x)), data.num_classes)
        problem = "" if ok else f"it outputs shape {tuple(out.shape)}"
    except FedbenchError:
        raise
    except Exception as exc:
        problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if problem:
        raise ConfigError("model", f"model={cfg.model.name} does not fit {data.name}'s inputs of shape "
                          f"{tuple(data.input_shape)} with {data.num_classes} classes ({problem}).",
                          "choose a model built for this input (README, Models).")
    return model
