"""Command-line entry point (``run.py``): preflight check of the overrides, then the Hydra app.

The preflight composes the config once per sweep value before Hydra starts, so a bad group option, an unknown key
or an invalid value ends the command with one paragraph naming the problem and the fix (exit status 2), never a
traceback. Errors found once a job runs (``FedbenchError``: impossible values, missing data) are reported the same
way.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import List, Optional

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from fedbench.config import register_configs
from fedbench.errors import FedbenchError

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")
CONFIG_NAME = "config"
_SKIP_FLAGS = {"--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc",
               "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--resolve", "-p", "--package"}


def _compose(overrides: List[str]) -> DictConfig:
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
            return compose(config_name=CONFIG_NAME, overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def _expand(args: List[str]) -> List[List[str]]:
    """Override lists to compose: the first value of every sweep, then each sweep value in turn."""
    parsed = OverridesParser.create().parse_overrides(args)
    base, sweeps = [], []
    for ov in parsed:
        if ov.key_or_group.startswith("hydra"):
            continue
        if ov.is_sweep_override():
            key = ov.input_line.split("=", 1)[0]
            values = [f"{key}={v}" for v in ov.sweep_string_iterator()]
            base.append(values[0])
            sweeps.append((len(base) - 1, values[1:]))
        else:
            base.append(ov.input_line)
    variants = [base]
    for pos, rest in sweeps:
        for v in rest:
            variants.append(base[:pos] + [v] + base[pos + 1:])
    return variants


def _text(exc: BaseException) -> str:
    parts = []
    while exc is not None:
        parts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def _friendly(exc: Exception, overrides: List[str]) -> str:
    text = _text(exc)
    m = re.search(r"Could not find '([^']+)/([^'/]+)'", text)
    if m:
        group, option = m.group(1), m.group(2)
        options = re.findall(r"^\t(\S+)$", text, flags=re.M)
        allowed = ", ".join(options) if options else "(see conf/" + group + "/)"
        return (f"Unknown option '{option}' for config group '{group}'. Allowed: {allowed}. "
                f"Fix: pass {group}=<one of these>.")
    m = re.search(r"Could not load '([^']+)'", text) or re.search(r"Could not find '([^']+)'", text)
    if m and "/" not in m.group(1):
        return f"Unknown config '{m.group(1)}'. Fix: check the option name against the files under conf/."
    m = re.search(r"Key '([^']+)' not in '[^']*'\s+full_key: (\S+)", text) or re.search(
        r"Key '([^']+)' is not in struct\s+full_key: (\S+)", text)
    if m:
        key, full = m.group(1), m.group(2)
        parent = full.rsplit(".", 1)[0] if "." in full else ""
        allowed = _allowed_keys(parent, [o for o in overrides if not o.lstrip("+~").startswith(full)])
        where = f"'{parent}'" if parent else "the top level"
        return (f"Unknown key '{key}' in {where} (override '{full}'). Allowed keys: {allowed}. "
                f"Fix: use one of these keys (run 'python run.py --cfg job' to see the composed config).")
    m = re.search(r"Invalid value '([^']*)', expected one of \[([^\]]*)\]\s+full_key: (\S+)", text)
    if m:
        return (f"Invalid value '{m.group(1)}' for '{m.group(3)}'. Allowed: {m.group(2)}. "
                f"Fix: pass {m.group(3)}=<one of these>.")
    m = re.search(r"Value '([^']*)' (?:of type '[^']*' )?could not be converted to (\w+)\s+full_key: (\S+)", text)
    if m:
        return (f"Invalid value '{m.group(1)}' for '{m.group(3)}': expected {m.group(2)}. "
                f"Fix: pass a value of type {m.group(2)}.")
    flat = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return f"Invalid configuration: {flat} Fix: correct the override named above."


def _allowed_keys(parent: str, overrides: List[str]) -> str:
    try:
        cfg = _compose(overrides)
        node = OmegaConf.select(cfg, parent) if parent else cfg
        return ", ".join(str(k) for k in node.keys())
    except Exception:
        return "(see 'python run.py --cfg job')"


def preflight(args: List[str]) -> Optional[str]:
    """Compose every variant of the command's overrides; return a one-paragraph error, or None if all compose."""
    if any(a.split("=")[0] in _SKIP_FLAGS for a in args):
        return None
    overrides = [a for a in args if not a.startswith("-")]
    try:
        variants = _expand(overrides)
    except Exception as exc:  # a syntax error in an override
        return _friendly(exc, [])
    for variant in variants:
        try:
            _compose(variant)
        except Exception as exc:
            return _friendly(exc, variant)
    return None


def fail(message: str) -> None:
    print(f"fedbench: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def run_job(cfg: DictConfig) -> Optional[float]:
    """One Hydra job: build the simulation, run it, write results; W&B is always finished."""
    from fedbench.engine.simulation import Simulation
    from fedbench.logging import RunLogger

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    root = Path(to_absolute_path(cfg.data.root))
    logger, code = None, 1
    try:
        sim = Simulation(cfg, run_dir, root)
        logger = RunLogger(run_dir, cfg)
        summary = sim.run(logger)
        logger.write_summary(summary)
        logger.print(f"[{cfg.algo.name}] results in {run_dir}")
        code = 0
        return summary["final_test_acc"]
    except FedbenchError as exc:
        fail(str(exc))
    finally:
        if logger is not None:
            logger.finish(code)
    return None


def main() -> None:
    register_configs()
    message = preflight(sys.argv[1:])
    if message:
        fail(message)
    hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=CONFIG_NAME)(run_job)()
