"""Run outputs: resolved config, metrics.csv, summary.json, W&B."""

from fedbench.logging.run_logger import RunLogger, sweep_group

__all__ = ["RunLogger", "sweep_group"]
