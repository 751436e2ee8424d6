"""Checks of the composed config before anything is built: every value against the rule its Config field declares
(``fedbench.options``: finite, in range, one of the choices), then the rules that relate keys of different
components. A component's own relations (S <= N, a Markov chain's feasible mixing rate) are checked by the
component when the run is built."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from fedbench.errors import require
from fedbench.options import check_values


def validate(cfg: DictConfig) -> None:
    """Every check that needs only the config: number ranges, then relations between keys."""
    from fedbench.training.schedule import validate_schedule

    check_values(cfg)
    validate_schedule(cfg.client.lr_schedule)
    require(not cfg.loss_targets or cfg.engine.eval_train, "loss_targets",
            "training-loss targets are read from the global model's loss on the training set.",
            "set engine.eval_train=true.")
    per_round = OmegaConf.select(cfg, "participation.selection.clients_per_round") or \
        OmegaConf.select(cfg, "partition.num_clients")
    workers = cfg.engine.workers
    require(workers <= 1 or not per_round or workers <= per_round, "engine.workers",
            f"{workers} worker processes share a round's {per_round} clients, so {workers - per_round} would sit "
            "idle (each costs a process and a copy of the data).", f"use at most {per_round}.")
