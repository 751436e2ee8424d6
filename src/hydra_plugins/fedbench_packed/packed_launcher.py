"""``hydra/launcher=packed``: the Hydra launcher that trains a multirun's jobs as packs (``fedbench.pack``).

Hydra instantiates launchers only from the ``hydra_plugins`` package, hence this module. Each job is set up by
Hydra's own ``run_job`` (its sweep config, output directory, ``.hydra/`` files, job callbacks), with a task that
returns the job's generator instead of running it; the packer then runs the generators. A job's ``JobReturn``
carries its final test accuracy once it has ended. Hydra's job callbacks (``on_job_end``) therefore see a job
when it is set up, before it has run.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, open_dict


@dataclass
class PackedLauncherConf:
    _target_: str = "hydra_plugins.fedbench_packed.packed_launcher.PackedLauncher"


ConfigStore.instance().store(group="hydra/launcher", name="packed", node=PackedLauncherConf, provider="fedbench")


class PackedLauncher(Launcher):
    def __init__(self) -> None:
        self.config: Any = None
        self.hydra_context: Any = None
        self.task_function: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from fedbench.cli import job_steps
        from fedbench.pack import Job, Packer
        from fedbench.runs import StopSignals

        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        signals = StopSignals()
        returns: List[JobReturn] = []
        jobs: List[Job] = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            print(f"fedbench: packed launcher: job #{idx}: {' '.join(filter_overrides(overrides))}", flush=True)
            sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = idx
                sweep_config.hydra.job.num = idx
            ret = run_job(hydra_context=self.hydra_context, config=sweep_config, job_dir_key="hydra.sweep.dir",
                          job_subdir_key="hydra.sweep.subdir",
                          task_function=lambda cfg: job_steps(cfg, HydraConfig.get(), signals))
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
            if ret.status != JobStatus.COMPLETED:  # the set-up itself failed: Hydra's error, as for any launcher
                returns.append(ret)
                continue
            steps, ret.return_value = ret.return_value, None
            jobs.append(Job(steps, lambda value, ret=ret: setattr(ret, "return_value", value)))
            returns.append(ret)
        with signals:
            Packer(signals).run(jobs)
        return returns
