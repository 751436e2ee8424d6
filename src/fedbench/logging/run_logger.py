"""Writes a run's results into its directory and, optionally, to Weights & Biases.

Files (always): ``config.yaml`` (resolved), ``metrics.csv`` (one row per evaluation, flushed as it is written),
``rounds.csv`` (per-round participation counts, training loss and learning rate), ``summary.json`` (strict JSON,
rewritten atomically at each evaluation with ``status`` running and at the end). Every file is written through
``fedbench.storage`` (a storage fault is a ``StorageFault`` naming the file). W&B
(``logger=wandb``, offline by default) gets the same rows against ``round`` as the step metric, the config with
dotted keys, tags (algo, dataset, partition, participation), the summary and the partition / participation images;
runs of a sweep share a group derived from the config without the seed, and ``finish`` is always called.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import DictConfig, OmegaConf

from fedbench.storage import guard, open_for_writing, write_text
from fedbench.tree import flatten, strict_json

_NOT_IN_GROUP = ("seed", "logger", "engine", "hydra")


def plain_config(cfg: DictConfig) -> Dict[str, Any]:
    """The resolved config as plain dicts and lists (enums as strings): what config.yaml and checkpoints hold."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]


def sweep_group(cfg: DictConfig) -> str:
    """A W&B group shared by all seeds of one configuration: ``<algo>-<dataset>-<hash of config minus seed>``."""
    plain = {k: v for k, v in plain_config(cfg).items() if k not in _NOT_IN_GROUP}
    plain.get("data", {}).pop("seed", None)
    digest = hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()[:8]
    return f"{cfg.algo.name}-{cfg.dataset.name}-{digest}"


def write_json(path: Path, value: Any) -> None:
    """Write strict JSON atomically (``fedbench.storage.write_text``: a failed write leaves the old file)."""
    write_text(path, json.dumps(strict_json(value), indent=2, sort_keys=True, allow_nan=False))


class _CsvTable:
    """A CSV file opened on its first row, whose columns are that row's keys. ``keep_until`` (resuming): the
    existing file's rows up to that round are kept, later ones (written after the checkpoint) dropped, and new
    rows appended."""

    def __init__(self, path: Path, keep_until: Optional[int] = None):
        self.path = path
        self.file = None
        self.writer = None
        if keep_until is not None and path.is_file():
            with open(path, newline="", encoding="utf-8", errors="replace") as f:
                reader = csv.DictReader(f)
                fields = reader.fieldnames
                rows = [r for r in reader if None not in r.values() and None not in r
                        and r["round"].isdigit() and int(r["round"]) <= keep_until]  # drops a torn last line
            if fields:
                text = io.StringIO(newline="")
                writer = csv.DictWriter(text, fieldnames=fields)
                writer.writeheader()
                writer.writerows(rows)
                write_text(path, text.getvalue())
                self.file = open_for_writing(path, "a")
                self.writer = csv.DictWriter(self.file, fieldnames=fields)

    def write(self, row: Dict[str, Any]) -> None:
        with guard(self.path, "append to"):
            if self.writer is None:
                self.file = open_for_writing(self.path, "w")
                self.writer = csv.DictWriter(self.file, fieldnames=list(row))
                self.writer.writeheader()
            self.writer.writerow(row)

    def flush(self) -> None:
        if self.file is not None:
            with guard(self.path, "append to"):
                self.file.flush()

    def close(self) -> None:
        file, self.file, self.writer = self.file, None, None
        if file is not None:
            with guard(self.path, "append to"):
                file.close()


class RunLogger:
    """``resume_round`` (a resumed run): the CSVs keep their rows up to that round and are appended to, and
    the W&B run ``wandb_id`` is resumed."""

    def __init__(self, run_dir: Path, cfg: DictConfig, resume_round: Optional[int] = None,
                 wandb_id: Optional[str] = None):
        self.run_dir = Path(run_dir)
        with guard(self.run_dir, "create"):
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.console = bool(cfg.logger.console)
        write_text(self.run_dir / "config.yaml", OmegaConf.to_yaml(plain_config(cfg)))
        self._metrics = _CsvTable(self.run_dir / "metrics.csv", resume_round)
        self._rounds = _CsvTable(self.run_dir / "rounds.csv", resume_round)
        self.wandb = None
        if cfg.logger.wandb:
            self._init_wandb(cfg, wandb_id)

    @property
    def run_id(self) -> Optional[str]:
        return None if self.wandb is None else self.wandb.id

    def _init_wandb(self, cfg: DictConfig, run_id: Optional[str]) -> None:
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        group = sweep_group(cfg)
        tags = [f"algo:{cfg.algo.name}", f"dataset:{cfg.dataset.name}", f"partition:{cfg.partition.name}",
                f"participation:{cfg.participation.name}", *cfg.logger.tags]
        self.wandb = wandb.init(
            project=cfg.logger.project,
            entity=cfg.logger.entity,
            group=group,
            name=f"{group}-seed{cfg.seed}",
            job_type=cfg.algo.name,
            tags=tags,
            config=flatten(plain_config(cfg)),  # dotted keys: every option is one column of the runs table
            dir=str(self.run_dir),
            mode=cfg.logger.mode.value,
            reinit="finish_previous",
            id=run_id,
            resume="allow" if run_id else None,
        )
        self.wandb.define_metric("round")
        self.wandb.define_metric("*", step_metric="round")  # every chart's x axis is the round

    def log_eval(self, row: Dict[str, Any]) -> None:
        self._rounds.flush()
        self._metrics.write(row)
        self._metrics.flush()
        if self.wandb is not None:
            self.wandb.log(row)

    def flush(self) -> None:
        self._rounds.flush()
        self._metrics.flush()

    def log_round(self, row: Dict[str, Any]) -> None:
        """Per-round statistics: ``rounds.csv`` and W&B keys ``round/<name>``."""
        self._rounds.write(row)
        if self.wandb is not None:
            self.wandb.log({"round": row["round"], **{f"round/{k}": v for k, v in row.items() if k != "round"}})

    def log_image(self, key: str, path: Path) -> None:
        if self.wandb is not None:
            import wandb

            self.wandb.log({key: wandb.Image(str(path))})

    def write_summary(self, summary: Dict[str, Any]) -> None:
        """``summary.json``, atomically and as strict JSON (non-finite numbers become null)."""
        write_json(self.run_dir / "summary.json", summary)
        if self.wandb is not None:
            for k, v in strict_json(summary).items():
                self.wandb.summary[k] = v

    def print(self, line: str) -> None:
        if self.console:
            print(line, flush=True)

    def close_files(self) -> None:
        """Close the CSV files (a ``StorageFault`` if their last rows cannot be written)."""
        try:
            self._metrics.close()
        finally:
            self._rounds.close()

    def finish(self, exit_code: int = 0) -> None:
        """Close the files and finish the W&B run; W&B is finished whatever happens to the files."""
        try:
            self.close_files()
        finally:
            run, self.wandb = self.wandb, None
            if run is not None:
                run.finish(exit_code=exit_code)
