"""``hydra/sweeper=tune``: the Hydra sweeper that runs a ``fedbench-tune`` plan (``fedbench.tune.protocol``).

Hydra instantiates sweepers only from the ``hydra_plugins`` package, hence this module; the protocol itself lives
in ``fedbench.tune``. Its jobs go through the configured launcher (basic, joblib, submitit, Ray) like any sweep's,
each with its own ``hydra.sweep.subdir`` under the tuning directory (``hydra.sweep.dir``).
"""


import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf


@dataclass
class TuneSweeperConf:
    _target_: str = "hydra_plugins.fedbench_tune.tune_sweeper.TuneSweeper"
    plan: str = ""  # the tune.json that fedbench-tune writes


ConfigStore.instance().store(group="hydra/sweeper", name="tune", node=TuneSweeperConf, provider="fedbench")


class TuneSweeper(Sweeper):
    def __init__(self, plan: str = "") -> None:
        self.plan = plan
        self.config: Any = None
        self.launcher: Any = None
        self.job_idx = 0

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def _launch(self, jobs: List[Any]) -> None:
        from fedbench.runs import StopSignals

        batch = [[*job.overrides, f"hydra.sweep.subdir={job.name}"] for job in jobs]
        self.launcher.launch(batch, initial_job_idx=self.job_idx)
        self.job_idx += len(batch)
        stop = StopSignals.stopped()  # the main process's (fedbench.cli.main): no further phase after a stop signal
        if stop is not None:
            root = self.config.hydra.sweep.dir
            print(f"fedbench-tune: stopped by {stop.reason()}: its running jobs stopped after their round with a "
                  f"checkpoint. Rerun with --dir {root} to continue (finished jobs are skipped, the others resume).",
                  file=sys.stderr, flush=True)
            raise SystemExit(stop.exit_code)

    def sweep(self, arguments: List[str]) -> Any:
        from fedbench.cli import SWEEP_FAILED
        from fedbench.errors import FedbenchError
        from fedbench.storage import StorageFault
        from fedbench.tune.protocol import Plan, Tuning

        if not self.plan:
            raise FedbenchError("hydra/sweeper=tune runs the plan fedbench-tune writes. Fix: start the tuning with "
                                "'fedbench-tune <overrides> --algos a,b ...'.")
        root = Path(self.config.hydra.sweep.dir)
        root.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, root / "multirun.yaml")
        try:
            SWEEP_FAILED[:] = Tuning(Plan.load(Path(self.plan)), root, self._launch).run()
        except (FedbenchError, StorageFault) as exc:  # one paragraph, never a traceback
            print(f"fedbench-tune: error: {exc}" + (f". Fix: {exc.fix}; then rerun with --dir {root} to continue."
                                                    if isinstance(exc, StorageFault) else ""),
                  file=sys.stderr, flush=True)
            raise SystemExit(1) from None
        return None
