"""Rerun a paper's comparison of docs/reproductions.md end to end through ``fedbench-tune``.

    python scripts/reproduce.py PAPER [--scale small|full|tiny] [--section NAME]... [--out DIR] [--dry-run]
                                [Hydra overrides shared by every job, e.g. hydra/launcher=joblib]
    make reproduce PAPER=wang22 [SCALE=small|full] [ARGS="--section periodic"]

Each section is one ``fedbench-tune`` command on the paper's preset (``<experiment>_small`` at ``small``, the
preset itself at ``full``): every method gets the same number of trials from its search space (the paper's grid where
the preset declares one), selection on the validation split, then the final seeds; the tuning directory's
``selection.json`` and ``report/`` (``fedbench-report``: tables, paired comparisons, curves) are the section's
evidence. The directory is ``<out>/<paper>/<scale>/<section>``, so rerunning the same command continues it: finished
trials and final runs are skipped. A section ``joint`` with an earlier one (tuned alike, on other methods or under one
changed setting: ``check_joint``) then writes ``report_joint/``: ``fedbench-report`` of both sections' final runs, and
of those of the earlier sections it names in ``joint_also`` (tuned alike too, on other methods still), so that a
comparison spread over several sections has one report. A section that extends an earlier one by a tuning seed names it
in ``reuse``: where that section's directory exists, ``fedbench-tune --reuse-runs`` copies its finished runs of the same
jobs instead of running them again. A section ``after`` an earlier one runs that one's choices (``fedbench-tune --from``
its ``selection.json``, no trials); where that file is missing, the record docs/reproductions.md links for the earlier
section, copied there, stands in for it. When a section's command ends, its new ``selection.json`` is compared with the
record docs/reproductions.md links for that section (``check_record``): the script says whether every tuning run and
choice agrees, or names each difference.

``tiny`` shrinks the small presets to seconds (the first two methods, two trials, final seeds 0 and 1): it checks
the pipeline end to end (the slow tests run it), never a ranking.

Stopping it (Ctrl-C, ``kill``, ``timeout``, a scheduler's SIGTERM) stops the running command's jobs after their
round, with a checkpoint, and waits for them to write it: rerunning the same command continues every job where it
stopped. Each command runs in a process group of its own, to which a SIGINT or SIGTERM sent to this script (or to its
group) is passed once; a second signal stops the jobs at once, from their latest checkpoint.

The launcher is each section's choice for a 2-core CPU (``packed`` for MLP models, two joblib workers of one thread
for convolutional ones); a ``hydra/launcher=...`` override replaces it (e.g. on a GPU machine).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from fedbench.tune.record import agreement

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reproductions.md"
#: in a result section of DOC, its selection record (under docs/tuned/) and the make reproduce command it shows
RECORD = re.compile(r"\(tuned/([\w.]+\.json)\)")
CALL = re.compile(r"make reproduce PAPER=(\w+)(?: SCALE=(\w+))?(?: ARGS=\"--section ([\w.]+)\")?")
SCALES = ("small", "full", "tiny")
#: launchers for a 2-core CPU: MLPs pack into one batched program, convolutional jobs run two at a time
LAUNCHERS = {
    "packed": ["hydra/launcher=packed"],
    "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
}
#: per-job overrides of every section (csv logs; at small scale a job is minutes, restarted whole on a rerun)
COMMON = {"small": ["logger=csv", "checkpoint_every=0"], "full": ["logger=csv"], "tiny": ["logger=csv",
                                                                                          "checkpoint_every=0"]}


@dataclass
class Section:
    """One comparison: the methods (``key`` = ``algo`` for ``--algos``, else ``--compare key=...``), the trials per
    method, the final seeds at each scale, the section's own overrides, the sub-grid of the paper's grid it searches
    when the whole grid does not fit a session (``space``), and how ``tiny`` shrinks it."""

    name: str
    experiment: str  # the small preset; full drops "_small"
    key: str
    methods: List[str]
    trials: int
    seeds: Dict[str, str]
    overrides: List[str] = field(default_factory=list)
    launcher: str = "joblib"
    tiny: List[str] = field(default_factory=list)
    space: List[str] = field(default_factory=list)  # --space KEY=V1,V2: a sub-grid, the same for every method
    # (a section that carries another's choices: that section's space, named in the labels of its joint report)
    after: str = ""  # the section whose choices this one runs (fedbench-tune --from its selection.json), no trials
    tune_seeds: str = "100"  # more than one where a single seed's choice proved unstable on the finals
    joint: str = ""  # an earlier section tuned alike on other methods: the two sections' finals reported together
    joint_also: List[str] = field(default_factory=list)  # with joint: more earlier sections tuned alike on other
    # methods, whose finals the joint report includes too
    ablation: List[str] = field(default_factory=list)  # with joint: overrides added to the partner's, so this
    # section may run the partner's methods again under the setting they change (an ablation)
    reuse: List[str] = field(default_factory=list)  # earlier sections whose finished runs of this one's jobs are
    # copied, not rerun (fedbench-tune --reuse-runs, passed where their directories exist): a tuning seed added
    paper: str = ""

    @property
    def partners(self) -> List[str]:
        """The sections whose finals the joint report includes beside this one's: ``joint``, then ``joint_also``."""
        return [self.joint, *self.joint_also] if self.joint else []

    def directory(self, scale: str, out: Path, name: str = "") -> Path:
        """The tuning directory of section ``name`` of this paper (this section's by default) at ``scale``."""
        return out / self.paper / scale / (name or self.name)

    def selection(self, scale: str, out: Path) -> Path:
        """The selection.json this section carries (``after``) at ``scale``."""
        return self.directory(scale, out, self.after) / "selection.json"

    def command(self, scale: str, out: Path, extra: List[str]) -> Tuple[List[str], Path]:
        experiment = self.experiment[: -len("_small")] if scale == "full" else self.experiment
        methods, trials, seeds = self.methods, self.trials, self.seeds.get(scale, "0,1")
        overrides = [f"experiment={experiment}", *COMMON[scale], *self.overrides, *self.ablation]
        if scale == "tiny":
            methods, trials, overrides = methods[:2], 2, [*overrides, *self.tiny]
        which = (["--algos", ",".join(methods)] if self.key == "algo"
                 else ["--compare", f"{self.key}={','.join(methods)}"])
        chosen = next((e.split("=", 1)[1] for e in extra if e.startswith("hydra/launcher=")), None)
        launcher = [] if chosen else LAUNCHERS[self.launcher]
        if (chosen or self.launcher) == "joblib":  # one thread per worker, also under a joblib given in extra
            overrides.append("engine.num_threads=1")
        directory = self.directory(scale, out)
        tuning = (["--from", str(self.selection(scale, out))] if self.after else
                  ["--trials", str(trials), *[arg for item in self.space for arg in ("--space", item)],
                   "--tune-seeds", self.tune_seeds])
        reuse = [arg for source in (self.directory(scale, out, name) for name in self.reuse)
                 if (source / "tune.json").is_file() for arg in ("--reuse-runs", str(source))]
        return ([sys.executable, "-m", "fedbench.tune.cli", *last_wins(overrides), *which, *tuning, "--seeds", seeds,
                 "--dir", str(directory), *reuse, *launcher, *extra], directory)

    def joint_command(self, scale: str, out: Path) -> Tuple[List[str], Path, List[Path]]:
        """``fedbench-report`` of this section's final runs with those of section ``joint`` and of the sections in
        ``joint_also`` (``report_joint/``): one group per method (and per value of the setting an ablation changes),
        the searched keys in the labels. ``check_joint`` makes them all tuned alike, so the
        comparisons across them are as fair as within one (same preset, seeds and traces, space and budget). Returns
        the command, the report's directory and the partners' final runs (the report needs them)."""
        here = self.directory(scale, out)
        partners = [self.directory(scale, out, name) / "final" for name in self.partners]
        group = ["algo.name" if self.key == "algo" else f"choice.{self.key}", *map(ablated_key, self.ablation)]
        tuned = sorted({item.split("=", 1)[0] for item in self.space})
        report = here / "report_joint"
        return ([sys.executable, "-m", "fedbench.report", *map(str, partners), str(here / "final"), "--group-by",
                 *group, *(["--tuned", *tuned] if tuned else []), "--out", str(report)], report, partners)


def ablated_key(override: str) -> str:
    """The config key by which a report tells an ablation's runs from its partner's: the override's key, an
    algorithm's option set through its preset table (``+algo_settings.fedamd.p=0.9``) as ``algo.p``."""
    key = override.split("=", 1)[0].lstrip("+")
    parts = key.split(".")
    return f"algo.{'.'.join(parts[2:])}" if parts[0] == "algo_settings" and len(parts) > 2 else key


def earlier(sections: List[Section], i: int, option: str, name: str) -> Section:
    """The section ``name`` that option ``option`` of ``sections[i]`` names, which must come before it."""
    found = next((s for s in sections[:i] if s.name == name), None)
    if found is None:
        raise ValueError(f"section {sections[i].name}: {option}='{name}' is not an earlier section of "
                         f"{sections[i].paper}. Allowed: {', '.join(s.name for s in sections[:i])}.")
    return found


def check_reuse(sections: List[Section]) -> None:
    """Every ``reuse`` names an earlier section of the same paper."""
    for i, section in enumerate(sections):
        for name in section.reuse:
            earlier(sections, i, "reuse", name)


def check_joint(sections: List[Section]) -> None:
    """Every ``joint`` (and ``joint_also``) names an earlier section of the same paper, tuned alike: everything but
    the methods (and the name) equal, so a reader may compare any two methods of the joint report. The methods
    differ, except in an ablation, which runs some of its single partner's methods under its added overrides."""
    alike = ("experiment", "key", "trials", "seeds", "overrides", "launcher", "tiny", "space", "after", "tune_seeds")
    group = joint_groups(sections)
    for i, section in enumerate(sections):
        if section.joint_also and not section.joint:
            raise ValueError(f"section {section.name}: joint_also needs joint (the first partner) set")
        if not section.joint:
            continue
        if section.ablation and section.joint_also:
            raise ValueError(f"section {section.name}: an ablation has one partner; joint_also must be empty")
        seen = {m: section.name for m in section.methods}
        carried = next((s for s in sections if s.name == section.after), None)
        for option, name in zip(["joint"] + ["joint_also"] * len(section.joint_also), section.partners):
            partner = earlier(sections, i, option, name)
            differ = [k for k in alike if getattr(section, k) != getattr(partner, k)]
            if "after" in differ and carried is not None and partner.after and \
                    group[carried.name] == group[partner.after]:
                differ.remove("after")  # they carry the choices of two sections of one joint group, tuned alike
            if section.ablation:  # the partner's methods again, which the report tells apart by the changed setting
                wrong = sorted(set(section.methods) - set(partner.methods))
                why = f"not in the partner: {', '.join(wrong)}"
                differ += ["ablation"] if partner.ablation else []
            else:  # no method in two of the report's sections
                wrong = sorted(m for m in partner.methods if m in seen)
                why = f"{', '.join(wrong)} also run by {', '.join(sorted({seen[m] for m in wrong}))}"
                seen.update({m: partner.name for m in partner.methods})
            if differ or wrong:
                raise ValueError(f"section {section.name} is not tuned like its joint section {partner.name}: "
                                 + (f"{', '.join(differ)} differ" if differ else why))


def joint_groups(sections: List[Section]) -> Dict[str, str]:
    """Each section's joint group, named by one of its sections: the sections linked by ``joint`` or ``joint_also``,
    either way. ``check_joint`` makes every link tuned alike, so the sections of a group are tuned alike."""
    root = {s.name: s.name for s in sections}

    def find(name: str) -> str:
        while root[name] != name:
            name = root[name]
        return name

    for section in sections:
        for partner in section.partners:
            if partner in root:  # an unknown partner is check_joint's error
                root[find(section.name)] = find(partner)
    return {name: find(name) for name in root}


def last_wins(overrides: List[str]) -> List[str]:
    """The overrides with one entry per key, the last given (a section's own replace the common ones)."""
    key = lambda o: o.split("=", 1)[0]  # noqa: E731
    return [o for i, o in enumerate(overrides) if all(key(later) != key(o) for later in overrides[i + 1:])]


WANG22 = ["amplified_fedavg", "no_amplification", "wait_minibatch", "wait_full"]
MIMIC = ["fedavg", "fedprox", "scaffold", "mifa", "mimic"]
MIMIC_TINY = ["rounds=3", "eval_every=1", "client.local_steps=2", "partition.max_per_client=60"]
#: MimiC's static active probability (§7.1, Fig. 7): every client available with p = 0.1 each round, independently
MIMIC_STATIC = ["participation=bernoulli", "participation.availability.prob=0.1"]
#: MimiC's round robin (§7.1, Fig. 4) at the preset's tau_max = 20, 10 and 5: section-name suffix, overrides
MIMIC_ROUND_ROBIN = [("", []), *((f"_tau{tau}", [f"participation.availability.tau_max={tau}"]) for tau in (10, 5))]
LENET_TINY = ["rounds=3", "eval_every=1", "client.local_steps=2", "partition.num_clients=20"]
FEDSRC_SYNTHETIC = ["uniform", "md", "fedsrc_g_oracle", "fedsrc_d_oracle", "power_of_choice"]
FEDSRC_SYNTHETIC_TINY = ["rounds=3", "eval_every=1"]
FEDSRC_PRACTICAL = ["fedsrc_d", "fedsrc_g"]
FEDSRC_FMNIST = ["uniform", *FEDSRC_PRACTICAL, "fedsrc_d_oracle", "fedsrc_g_oracle", "md", "cluster",
                 "power_of_choice"]
#: the samplers of the paper's real-data tables (Sec. 6), without the oracles, which train every client every round
FEDSRC_FMNIST_PRACTICAL = [s for s in FEDSRC_FMNIST if not s.endswith("_oracle")]
#: the two samplers of Table 5's claim, run at every S, and its other practical samplers, run at S = 10
FEDSRC_TABLE5_CLAIM = ["uniform", "fedsrc_d"]
FEDSRC_TABLE5_OTHERS = [s for s in FEDSRC_FMNIST_PRACTICAL if s not in FEDSRC_TABLE5_CLAIM]
#: four points of the declared client.lr grid around the paper's fixed 0.01, the same for every sampler
FEDSRC_FMNIST_SUBGRID = ["client.lr=0.1,0.03,0.01,0.003"]
FEDSRC_FMNIST_TINY = ["rounds=3", "eval_every=1", "client.local_steps=2", "partition.num_clients=30", "top_k=[2]"]
FEDAMD = ["fedamd", "fedavg", "scaffold", "fedpage", "bvr_l_sgd"]
FEDAMD_TINY = [*LENET_TINY, "participation.selection.clients_per_round=4"]
FEDAMD_SCHEDULES = ["fedamd_sequential", "fedamd", "fedamd_sequential3", "fedavg"]
#: every other eta_l of FedAMD's grid and its extreme eta_s: 6 of its 18 points, the same for every method
FEDAMD_SUBGRID = ["client.lr=0.1,0.02,0.005", "algo.server_lr=1.0,0.1"]
GRADMA = ["gradma", "fedavg", "gradma_w", "gradma_s", "fedavgm", "mifa", "moon", "feddyn", "mimelite", "fedmlb"]
#: the methods of the claims the full grid's one-seed choice left untestable (GradMA >> FedAvg; GradMA >= GradMA-S)
GRADMA_CLAIMS = ["gradma", "fedavg", "gradma_s"]
GRADMA_TINY = [*LENET_TINY, "participation.selection.clients_per_round=4"]

#: final seeds at small and full scale: three (the issue's minimum), five at small only, five at both
SEEDS_3 = {"small": "0,1,2", "full": "0,1,2"}
SEEDS_5_SMALL = {"small": "0,1,2,3,4", "full": "0,1,2"}
SEEDS_5 = {"small": "0,1,2,3,4", "full": "0,1,2,3,4"}


def maker(experiment: str, key: str, **common) -> Callable[..., Section]:
    """A paper's Section maker: its preset, the key its methods set and the options its sections share (``common``),
    each declared once; a section names only its own options, one it names replacing the shared one (``experiment``
    too). ``functools.partial`` of a maker shares more within a group of sections."""
    def make(name: str, methods: List[str], **options) -> Section:
        return Section(name, options.pop("experiment", experiment), key, methods, **{**common, **options})
    return make


wang22 = maker("wang22_fmnist_periodic_small", "algo", trials=5, launcher="packed")
mimic = maker("mimic_fmnist_roundrobin_small", "algo", trials=7, seeds=SEEDS_3, tiny=MIMIC_TINY)
fedsrc_synthetic = maker("fedsrc_synthetic_small", "participation/selection", trials=7, seeds=SEEDS_5,
                         tiny=FEDSRC_SYNTHETIC_TINY)
fedsrc_fmnist = maker("fedsrc_fmnist_small", "participation/selection", launcher="packed", tiny=FEDSRC_FMNIST_TINY)
#: FedSRC's practical samplers on the sub-grid, five final seeds at both scales (for SCALE=full)
fedsrc_practical = partial(fedsrc_fmnist, trials=4, seeds=SEEDS_5, space=FEDSRC_FMNIST_SUBGRID)
fedamd = maker("fedamd_fmnist_small", "algo", seeds=SEEDS_3, tiny=FEDAMD_TINY)
#: FedAMD on its sub-grid (6 of 18 points) and on its whole grid
fedamd_subgrid = partial(fedamd, trials=6, space=FEDAMD_SUBGRID)
fedamd_grid = partial(fedamd, trials=18)
FEDAMD_K20 = ["client.local_steps=20"]
#: the whole grid at K = 20 local steps (App. F)
fedamd_k20_grid = partial(fedamd_grid, overrides=FEDAMD_K20)
FEDAMD_500 = ["rounds=500", "checkpoint_every=50"]


def fedamd_cohort(a: int) -> List[str]:
    """The overrides for A = ``a`` clients a round (the paper's cohorts are 20, the preset's, 40 and 100)."""
    return [f"participation.selection.clients_per_round={a}"]


gradma = maker("gradma_cifar10_dir0.01_small", "algo", trials=9, seeds=SEEDS_3, overrides=["dataset=fmnist"],
               tiny=GRADMA_TINY)
#: GradMA at Dirichlet 0.1 (the preset's is 0.01)
gradma_dir01 = partial(gradma, overrides=["dataset=fmnist", "partition.alpha=0.1"])

PAPERS: Dict[str, List[Section]] = {
    "wang22": [
        # the 1,200-round tuning, then the MLP twin to 20,000 rounds (400 post-warm-up windows) at its choices; once
        # on tuning seed 100, once on 100 and 101 (the one-seed choice for amplified FedAvg, 1e-5 over 1e-4, won by
        # 0.0007); at the two-seed choices five final seeds, for the claim amplified > waiting, which three seeds
        # showed in direction only
        *(section for suffix, tune_seeds, seeds_20k in (("", "100", SEEDS_3), ("_2seeds", "100,101", SEEDS_5_SMALL))
          for section in (
            wang22(f"periodic{suffix}", WANG22, seeds=SEEDS_5_SMALL, tune_seeds=tune_seeds,
                   tiny=["rounds=6", "eval_every=2", "partition.num_clients=20"]),
            wang22(f"periodic_20k{suffix}", WANG22, seeds=seeds_20k, after=f"periodic{suffix}",
                   overrides=["rounds=20000", "eval_every=100", "checkpoint_every=2000"],
                   tiny=["rounds=8", "eval_every=2", "partition.num_clients=20"]))),
    ],
    "mimic": [
        *(mimic(f"roundrobin{suffix}", MIMIC, overrides=overrides) for suffix, overrides in MIMIC_ROUND_ROBIN),
        mimic("timevarying", MIMIC, experiment="mimic_fmnist_timevarying_small"),
        mimic("static", MIMIC, overrides=MIMIC_STATIC),
        # the two random-availability sections on two tuning seeds: their one-seed choices between eta_l = 0.1
        # and 0.03 flipped on a GPU (MimiC's and MIFA's under time-varying, FedAvg's under static p = 0.1); a job
        # costs under a minute, so five final seeds
        mimic("timevarying_2seeds", MIMIC, experiment="mimic_fmnist_timevarying_small", seeds=SEEDS_5_SMALL,
              tune_seeds="100,101"),
        mimic("static_2seeds", MIMIC, seeds=SEEDS_5_SMALL, tune_seeds="100,101", overrides=MIMIC_STATIC),
        # round robin on two tuning seeds, five final seeds: at tau_max = 20 one seed chose SCAFFOLD's 0.03, which
        # diverged on two of three final seeds, and left MIFA's lead over MimiC (3/3 seeds) without a t-verdict;
        # at tau_max = 10 and 5 MimiC and MIFA tie at n = 3
        *(mimic(f"roundrobin{suffix}_2seeds", MIMIC, seeds=SEEDS_5_SMALL, tune_seeds="100,101", overrides=overrides)
          for suffix, overrides in MIMIC_ROUND_ROBIN),
    ],
    "fedsrc": [
        # then on two tuning seeds: uniform's one-seed choice (0.003, the others 0.01) rests on one instance
        *(fedsrc_synthetic(name, FEDSRC_SYNTHETIC, tune_seeds=tune_seeds, reuse=reuse)
          for name, tune_seeds, reuse in (("synthetic", "100", []), ("synthetic_2seeds", "100,101", ["synthetic"]))),
        # the practical samplers (Sec. 6: stale statistics of the clients last sampled, what a deployment can run)
        # tuned alike; the paper's synthetic figures do not say which mode they used (spec A10)
        fedsrc_synthetic("synthetic_2seeds_practical", FEDSRC_PRACTICAL, tune_seeds="100,101",
                         joint="synthetic_2seeds"),
        fedsrc_fmnist("fmnist", FEDSRC_FMNIST, trials=4, seeds=SEEDS_5_SMALL),
        # every sampler on the whole 7-point grid (fmnist draws 4 of the 7 per sampler, so the points differ), then
        # on two tuning seeds (the one-seed trials copied)
        *(fedsrc_fmnist(name, FEDSRC_FMNIST, trials=7, seeds=SEEDS_5_SMALL, tune_seeds=tune_seeds, reuse=reuse)
          for name, tune_seeds, reuse in (("fmnist_fullgrid", "100", []),
                                          ("fmnist_fullgrid_2seeds", "100,101", ["fmnist_fullgrid"]))),
        # the practical samplers on a sub-grid, for SCALE=full: the paper's 300 clients, S = 20, 50 local steps and
        # 500 rounds (the oracles would cost about 15 times a practical sampler's job there); five final seeds (the
        # first three gave FedSRC-D's lead over uniform on final accuracy on 3/3 seeds, without a t-verdict); then
        # FedSRC-D with the official code's scorer (fedsrc_d_code, note A9: a beta = 0.5 mix of the update's norm and
        # its distance to the cohort's mean, the code behind Tables 2-5), tuned alike, reported with those finals
        fedsrc_practical("fmnist_practical", FEDSRC_FMNIST_PRACTICAL),
        fedsrc_practical("fmnist_practical_code", ["fedsrc_d_code"], joint="fmnist_practical"),
        # Table 5 (S in {10, 30, 50} clients a round at Dirichlet alpha = 1) for FedSRC-D's claim against uniform,
        # at SCALE=full as above, five final seeds (at S = 30 and 50 three at first, seeds 3 and 4 added later, the
        # finished jobs skipped); then at each S Table 5's other practical samplers, tuned alike, reported with those
        # two
        *(fedsrc_practical(name, methods, joint=joint,
                           overrides=["partition.alpha=1.0",
                                      f"where_supported.participation.selection.clients_per_round={s}"],
                           tiny=[*FEDSRC_FMNIST_TINY,
                                 f"where_supported.participation.selection.clients_per_round={s // 5}"])
          for s in (10, 30, 50)
          for name, methods, joint in ((f"fmnist_practical_alpha1_s{s}", FEDSRC_TABLE5_CLAIM, ""),
                                       (f"fmnist_practical_alpha1_s{s}_others", FEDSRC_TABLE5_OTHERS,
                                        f"fmnist_practical_alpha1_s{s}"))),
    ],
    "fedamd": [
        fedamd_subgrid("a20", FEDAMD),
        # the paper's whole 18-point grid (no --space): FedAMD's claim against FedAvg, then the three other
        # baselines tuned alike (a20_fullgrid_baselines, 71 min on two cores, joint with it)
        fedamd_grid("a20_fullgrid", FEDAMD[:2]),
        fedamd_grid("a20_fullgrid_baselines", FEDAMD[2:], joint="a20_fullgrid"),
        # the whole grid on two tuning seeds: a20_fullgrid's one-seed choice for FedAMD collapsed on 2 of 3 finals
        fedamd_grid("a20_fullgrid_2seeds", FEDAMD[:2], tune_seeds="100,101"),
        # the three other baselines alike, joint with it: a20_fullgrid_baselines's one-seed choices for SCAFFOLD and
        # BVR-L-SGD diverged on a final seed each (its seed-100 trials are copied)
        fedamd_grid("a20_fullgrid_2seeds_baselines", FEDAMD[2:], tune_seeds="100,101", joint="a20_fullgrid_2seeds",
                    reuse=["a20_fullgrid_baselines"]),
        # the paper's larger cohorts on a20's sub-grid (p follows A through Cor. 4.9: 0.93 at A = 40, 0.96 at 100)
        *(fedamd_subgrid(f"a{a}", FEDAMD, overrides=fedamd_cohort(a))
          for a in (40, 100)),
        # App. F (Figs. 8-10): the five methods at K = 5 and 20 local steps (K = 10 is a20), on a20's sub-grid; at
        # K = 20 (twice a20's time a job) FedAMD's claim against FedAvg first, the three other baselines tuned alike
        # in a joint part
        *(fedamd_subgrid(name, methods, overrides=[f"client.local_steps={k}"], joint=joint)
          for k, name, methods, joint in ((5, "a20_k5", FEDAMD, ""), (20, "a20_k20", FEDAMD[:2], ""),
                                          (20, "a20_k20_baselines", FEDAMD[2:], "a20_k20"))),
        # K = 20 on two tuning seeds, the five methods tuned alike in two joint parts: a20_k20_baselines's one-seed
        # choice for FedPAGE diverged on every final seed (the seed-100 trials are copied where those sections ran)
        *(fedamd_subgrid(name, methods, overrides=FEDAMD_K20, tune_seeds="100,101", joint=joint, reuse=[reused])
          for name, methods, joint, reused in (("a20_k20_2seeds", FEDAMD[:2], "", "a20_k20"),
                                               ("a20_k20_2seeds_baselines", FEDAMD[2:], "a20_k20_2seeds",
                                                "a20_k20_baselines"))),
        # FedAMD's claim against FedAvg at K = 20 on the paper's whole 18-point grid (no --space): on the sub-grid
        # FedAMD trained only at eta_s = 0.1, slowly, and diverged elsewhere; the whole grid adds
        # eta_s = 0.8 and eta_l in {0.03, 0.01, 0.008}
        fedamd_k20_grid("a20_k20_fullgrid", FEDAMD[:2]),
        # SCAFFOLD and BVR-L-SGD alike, joint with it: on the sub-grid both kept its smallest eta_l, the next larger
        # point having diverged, so the whole grid's eta_l in {0.01, 0.008} may hold a better stable choice
        fedamd_k20_grid("a20_k20_fullgrid_baselines", [FEDAMD[2], FEDAMD[4]], joint="a20_k20_fullgrid"),
        # FedPAGE alike, the fifth method, joint with both: its sub-grid choices diverged on final seeds at one and
        # two tuning seeds, and the whole grid adds eta_s = 0.8 and eta_l in {0.03, 0.01, 0.008} between its points
        fedamd_k20_grid("a20_k20_fullgrid_fedpage", FEDAMD[3:4], joint="a20_k20_fullgrid",
                        joint_also=["a20_k20_fullgrid_baselines"]),
        # the whole grid at K = 20 on two tuning seeds, FedAMD and FedAvg first (the seed-100 trials are copied where
        # a20_k20_fullgrid ran): there the one-seed choices of SCAFFOLD, BVR-L-SGD and FedPAGE lost final seeds
        fedamd_k20_grid("a20_k20_fullgrid_2seeds", FEDAMD[:2], tune_seeds="100,101", reuse=["a20_k20_fullgrid"]),
        # SCAFFOLD and BVR-L-SGD alike, joint with it: on one seed each one's whole-grid choice diverged on a final
        # seed (the seed-100 trials are copied where a20_k20_fullgrid_baselines ran)
        fedamd_k20_grid("a20_k20_fullgrid_2seeds_baselines", [FEDAMD[2], FEDAMD[4]],
                        tune_seeds="100,101", joint="a20_k20_fullgrid_2seeds", reuse=["a20_k20_fullgrid_baselines"]),
        # FedPAGE alike, joint with both: on one seed its whole-grid choice diverged on every final seed (the
        # seed-100 trials are copied where a20_k20_fullgrid_fedpage ran)
        fedamd_k20_grid("a20_k20_fullgrid_2seeds_fedpage", FEDAMD[3:4], tune_seeds="100,101",
                        joint="a20_k20_fullgrid_2seeds", joint_also=["a20_k20_fullgrid_2seeds_baselines"],
                        reuse=["a20_k20_fullgrid_fedpage"]),
        # the paper's own p at A = 100 (Table 2 implies 0.9, FedAMD note section 4.3; Cor. 4.9 gives 0.96): about 10
        # miners a round instead of 4, tuned on the same sub-grid
        fedamd_subgrid("a100_p0.9", FEDAMD[:1], overrides=fedamd_cohort(100),
                       joint="a100", ablation=["+algo_settings.fedamd.p=0.9"]),
        # A = 40 on two tuning seeds (the seed-100 trials are copied where a40 ran): FedAMD's claim against FedAvg
        # first, as a40's one-seed choice for FedAMD ended 0.46 to 0.67 over the final seeds and at A = 20 a second
        # tuning seed moved FedAMD's choice; then SCAFFOLD, BVR-L-SGD and FedPAGE tuned alike, each joint with the
        # first part (and with the parts before it), a40's one-seed choices for the first two sitting beside diverged
        # grid points and FedPAGE's falling to chance on a final seed
        *(fedamd_subgrid(name, methods, overrides=fedamd_cohort(40), tune_seeds="100,101", joint=joint,
                         joint_also=also, reuse=["a40"])
          for name, methods, joint, also in (("a40_2seeds", FEDAMD[:2], "", []),
                                             ("a40_2seeds_scaffold", FEDAMD[2:3], "a40_2seeds", []),
                                             ("a40_2seeds_bvr", FEDAMD[4:], "a40_2seeds", ["a40_2seeds_scaffold"]),
                                             ("a40_2seeds_fedpage", FEDAMD[3:4], "a40_2seeds",
                                              ["a40_2seeds_scaffold", "a40_2seeds_bvr"]))),
        # FedAMD's claim against FedAvg on two tuning seeds: a20's one-seed choice diverged on a final seed in a20_500
        fedamd_subgrid("a20_2seeds", FEDAMD[:2], tune_seeds="100,101"),
        # the three other baselines on the same two tuning seeds: with a20_2seeds, all five methods tuned alike
        fedamd_subgrid("a20_2seeds_baselines", FEDAMD[2:], tune_seeds="100,101", joint="a20_2seeds"),
        # the issue's budget (75 % or at least 500 rounds) at a20's choices: does FedAMD's peak rise with rounds?
        fedamd("a20_500", FEDAMD, trials=6, after="a20", overrides=FEDAMD_500),
        # FedAMD and FedAvg tuned at the budget itself (500 rounds; the paper reports 400), not carried
        fedamd_subgrid("a20_500_tuned", FEDAMD[:2], overrides=FEDAMD_500),
        # the three other baselines tuned alike at 500 rounds, joint with it
        fedamd_subgrid("a20_500_tuned_baselines", FEDAMD[2:], overrides=FEDAMD_500, joint="a20_500_tuned"),
        # FedAMD and FedAvg tuned at 500 rounds on two tuning seeds: a20_500_tuned's one-seed choice for FedAMD
        # diverged on a final seed (the protocol's remedy); the seed-100 trials are a20_500_tuned's
        fedamd_subgrid("a20_500_2seeds", FEDAMD[:2], overrides=FEDAMD_500, tune_seeds="100,101",
                       reuse=["a20_500_tuned"]),
        # the three other baselines tuned alike (500 rounds, two tuning seeds), joint with it
        fedamd_subgrid("a20_500_2seeds_baselines", FEDAMD[2:], overrides=FEDAMD_500, tune_seeds="100,101",
                       joint="a20_500_2seeds", reuse=["a20_500_tuned_baselines"]),
        # FedAMD and FedAvg on a third tuning seed: a20_500_2seeds's choice for FedAMD still diverged on a final seed
        fedamd_subgrid("a20_500_3seeds", FEDAMD[:2], overrides=FEDAMD_500, tune_seeds="100,101,102",
                       reuse=["a20_500_2seeds"]),
        # the same budget at the two-seed choices of all five (the three at eta_s = 0.1 still climbed at round 150)
        *(fedamd_subgrid(name, methods, after=after, overrides=FEDAMD_500, joint=joint)
          for name, methods, after, joint in (
              ("a20_2seeds_500", FEDAMD[:2], "a20_2seeds", ""),
              ("a20_2seeds_baselines_500", FEDAMD[2:], "a20_2seeds_baselines", "a20_2seeds_500"))),
        # Table 2's two schedules and Cor. 4.7's period, tuned alike with FedAvg on a20's sub-grid: the constant
        # p of Cor. 4.9 against the sequential {0,1} (tau = 2) and {0,0,1} (tau = 3)
        fedamd_subgrid("a20_schedules", FEDAMD_SCHEDULES),
        # the same on two tuning seeds: a20_schedules' one-seed choice for the sequential {0,1} diverged on every
        # final seed, FedAMD's on one (its seed-100 trials are copied)
        fedamd_subgrid("a20_schedules_2seeds", FEDAMD_SCHEDULES, tune_seeds="100,101", reuse=["a20_schedules"]),
        # Cor. 4.7 to the issue's budget: a20_schedules_2seeds' choices (both sequential schedules at the grid's
        # smallest step, still rising at round 150) to 500 rounds, with the constant p and FedAvg it compared
        fedamd_subgrid("a20_schedules_2seeds_500", FEDAMD_SCHEDULES, after="a20_schedules_2seeds",
                       overrides=FEDAMD_500),
    ],
    "gradma": [
        # the paper's eta_l grid at eta_g = 1 (3 of its 9 points; FedDyn's alpha drawn with it)
        gradma("dir0.01", GRADMA, trials=3, space=["algo.server_lr=1.0"]),
        gradma_dir01("dir0.1", GRADMA, trials=3, space=["algo.server_lr=1.0"]),
        gradma("dir0.01_fullgrid", GRADMA),
        gradma_dir01("dir0.1_fullgrid", GRADMA),
        # GradMA's claims on two tuning seeds: the full grid's one-seed choice for GradMA diverged on every final seed
        gradma("dir0.01_fullgrid_2seeds", GRADMA_CLAIMS, tune_seeds="100,101"),
        # the ablation's claim (GradMA-S >> GradMA-W) under the same two-seed protocol, both variants tuned here
        gradma("dir0.01_fullgrid_2seeds_ablation", ["gradma_s", "gradma_w"], tune_seeds="100,101"),
        # the ablation on a third tuning seed: the two-seed choice for GradMA-S, (0.1, 1) by 0.0009, diverged on two
        # of three final seeds (the seeds 100 and 101 trials are the section above's)
        gradma("dir0.01_fullgrid_3seeds_ablation", ["gradma_s", "gradma_w"], tune_seeds="100,101,102",
               reuse=["dir0.01_fullgrid_2seeds_ablation"]),
        # the claims' other methods on the same three tuning seeds, joint with the ablation (GradMA-S is there)
        gradma("dir0.01_fullgrid_3seeds", ["gradma", "fedavg"], tune_seeds="100,101,102",
               joint="dir0.01_fullgrid_3seeds_ablation", reuse=["dir0.01_fullgrid_2seeds"]),
        # the three baselines nearest GradMA on the one-seed grid, on the same three tuning seeds, joint with the claims
        gradma("dir0.01_fullgrid_3seeds_baselines", ["fedavgm", "mifa", "feddyn"], tune_seeds="100,101,102",
               joint="dir0.01_fullgrid_3seeds"),
        # the three baselines further behind (MOON, MimeLite, FedMLB), so all ten have 27 tuning runs at Dirichlet
        # 0.01; its joint report is the ten methods' (the three sections above tuned alike)
        gradma("dir0.01_fullgrid_3seeds_others", ["moon", "mimelite", "fedmlb"], tune_seeds="100,101,102",
               joint="dir0.01_fullgrid_3seeds",
               joint_also=["dir0.01_fullgrid_3seeds_ablation", "dir0.01_fullgrid_3seeds_baselines"]),
        # MOON at its paper's CIFAR-10 mu = 5 (fedbench's default, 1, is its CIFAR-100 value), then at a tenth of the
        # default, each tuned alike and reported with the section above's finals (ablations, not a search: MOON's
        # setting stays mu = 1)
        *(gradma(f"dir0.01_fullgrid_3seeds_moon_mu{mu}", ["moon"], tune_seeds="100,101,102",
                 joint="dir0.01_fullgrid_3seeds_others", ablation=[f"+algo_settings.moon.mu={mu}"])
          for mu in (5, 0.1)),
        # the ten methods' three-seed choices on five final seeds (a final of each but GradMA, GradMA-W and MimeLite
        # cost about a minute or less on the CPU that ran them): on three, GradMA-S led GradMA on final accuracy by
        # differences that barely varied, and the baselines' verdicts against FedAvg wanted more seeds; each part
        # carries one of the four sections above's choices and is joint as they are, the last part's report holding
        # all ten
        gradma("dir0.01_fullgrid_3seeds_ablation_5finals", ["gradma_s", "gradma_w"], seeds=SEEDS_5,
               after="dir0.01_fullgrid_3seeds_ablation"),
        gradma("dir0.01_fullgrid_3seeds_5finals", ["gradma", "fedavg"], seeds=SEEDS_5, after="dir0.01_fullgrid_3seeds",
               joint="dir0.01_fullgrid_3seeds_ablation_5finals"),
        gradma("dir0.01_fullgrid_3seeds_baselines_5finals", ["fedavgm", "mifa", "feddyn"], seeds=SEEDS_5,
               after="dir0.01_fullgrid_3seeds_baselines", joint="dir0.01_fullgrid_3seeds_5finals"),
        gradma("dir0.01_fullgrid_3seeds_others_5finals", ["moon", "mimelite", "fedmlb"], seeds=SEEDS_5,
               after="dir0.01_fullgrid_3seeds_others", joint="dir0.01_fullgrid_3seeds_5finals",
               joint_also=["dir0.01_fullgrid_3seeds_ablation_5finals", "dir0.01_fullgrid_3seeds_baselines_5finals"]),
        # the same two-seed protocol at Dirichlet 0.1, the claims' methods, then the ablation (GradMA-S's runs copied)
        gradma_dir01("dir0.1_fullgrid_2seeds", GRADMA_CLAIMS, tune_seeds="100,101", reuse=["dir0.1_fullgrid"]),
        gradma_dir01("dir0.1_fullgrid_2seeds_ablation", ["gradma_s", "gradma_w"], tune_seeds="100,101",
                     reuse=["dir0.1_fullgrid", "dir0.1_fullgrid_2seeds"]),
        # the six other baselines under the same two-seed protocol, joint with the claims' section
        gradma_dir01("dir0.1_fullgrid_2seeds_baselines", GRADMA[4:], tune_seeds="100,101",
                     joint="dir0.1_fullgrid_2seeds", reuse=["dir0.1_fullgrid"]),
        # MIFA on a third tuning seed: its two-seed choice (0.1, 10) diverged on a final seed (the seeds 100 and 101
        # trials are the section above's)
        gradma_dir01("dir0.1_fullgrid_3seeds_mifa", ["mifa"], tune_seeds="100,101,102",
                     reuse=["dir0.1_fullgrid_2seeds_baselines"]),
        # every method on three tuning seeds, so all ten have MIFA's tuning budget (27 runs each); the seeds 100 and
        # 101 trials, and the finals of choices that stand, are the two-seed sections' runs
        gradma_dir01("dir0.1_fullgrid_3seeds", GRADMA, tune_seeds="100,101,102",
                     reuse=["dir0.1_fullgrid_2seeds", "dir0.1_fullgrid_2seeds_ablation",
                            "dir0.1_fullgrid_2seeds_baselines", "dir0.1_fullgrid_3seeds_mifa"]),
        # the three-seed choices of the claims' methods and the two baselines nearest GradMA on five final seeds:
        # MIFA's choice diverged on seed 1, so its pairs rested on two seeds
        gradma_dir01("dir0.1_fullgrid_3seeds_5finals", ["gradma", "gradma_s", "fedavg", "fedavgm", "mifa"],
                     seeds=SEEDS_5, after="dir0.1_fullgrid_3seeds"),
    ],
}
for _paper, _sections in PAPERS.items():
    for _s in _sections:
        _s.paper = _paper
    check_joint(_sections)
    check_reuse(_sections)


def sections(text: str) -> List[Tuple[str, str]]:
    """(heading, body up to the next heading of any level) of a Markdown text, skipping fenced code when looking for
    headings."""
    out, heading, body, fenced = [], None, [], False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        match = None if fenced else re.match(r"#{1,6} (.+)", line)
        if match:
            out.append((heading, "\n".join(body)))
            heading, body = match.group(1).strip(), []
        else:
            body.append(line)
    out.append((heading, "\n".join(body)))
    return [(h, b) for h, b in out if h is not None]


def called(body: str) -> Optional[Tuple[str, str, str]]:
    """The (paper, scale, section) of the first ``make reproduce`` command a section of the document shows (``SCALE``
    small and the paper's first section where the command leaves them out); None where it shows none of a paper."""
    call = CALL.search(body)
    if not call or call.group(1) not in PAPERS:
        return None
    paper = call.group(1)
    return paper, call.group(2) or "small", call.group(3) or PAPERS[paper][0].name


def documented(text: str) -> Dict[Tuple[str, str, str], str]:
    """The selection record each result section of ``text`` (docs/reproductions.md) links, by the (paper, scale,
    section) of the command it shows (``called``)."""
    found: Dict[Tuple[str, str, str], str] = {}
    for _, body in sections(text):
        record, call = RECORD.search(body), called(body)
        if record and call:
            found.setdefault(call, record.group(1))
    return found


def documented_record(paper: str, scale: str, name: str) -> Optional[str]:
    """The file name under docs/tuned/ of the record docs/reproductions.md links for section ``name`` of ``paper``
    at ``scale``; None where the document (or that section's record) is absent."""
    return documented(DOC.read_text()).get((paper, scale, name)) if DOC.is_file() else None


def check_record(paper: str, section: Section, scale: str, directory: Path) -> None:
    """Say how the section's new selection.json agrees with the record docs/reproductions.md shows for it (the same
    trials, tuning-run scores and choices: ``fedbench.tune.record``); nothing where the document has none."""
    record = documented_record(paper, scale, section.name)
    here = directory / "selection.json"
    if record is None or not here.is_file():
        return
    text = agreement(json.loads(here.read_text()), json.loads((DOC.parent / "tuned" / record).read_text()))
    print(f"== {paper}/{section.name}: its selection.json {text} (docs/tuned/{record})", flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paper", choices=sorted(PAPERS), help="the paper whose comparisons to rerun")
    p.add_argument("--scale", choices=SCALES, default="small", help="small presets (default), the full presets, "
                   "or tiny (a seconds-long check of the pipeline)")
    p.add_argument("--section", action="append", default=[], help="only these sections (repeatable)")
    p.add_argument("--out", type=Path, default=ROOT / "outputs" / "reproduce", help="where the tuning directories go")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    return p


def main(argv=None) -> int:
    args, extra = parser().parse_known_args(argv)
    sections = PAPERS[args.paper]
    names = [s.name for s in sections]
    unknown = [n for n in args.section if n not in names]
    if unknown:
        print(f"reproduce.py: unknown --section '{unknown[0]}' for {args.paper}. Allowed: {', '.join(names)}.",
              file=sys.stderr)
        return 2
    bad = [e for e in extra if e.startswith("-")]
    if bad:
        print(f"reproduce.py: unknown option '{bad[0]}'. Pass Hydra overrides as key=value.", file=sys.stderr)
        return 2
    bare = [e for e in extra if "=" not in e and not e.startswith("~")]
    if bare:
        print(f"reproduce.py: '{bare[0]}' is neither an option nor a Hydra override (key=value, ~key). "
              f"To run several sections, repeat --section.", file=sys.stderr)
        return 2
    status, out = 0, args.out.resolve()
    for section in sections:
        if args.section and section.name not in args.section:
            continue
        cmd, directory = section.command(args.scale, out, extra)
        print(f"== {args.paper}/{section.name} ({args.scale}): fedbench-tune {shlex.join(cmd[3:])}", flush=True)
        joint = section.joint_command(args.scale, out) if section.joint else None
        if joint:
            print(f"   then, with section{'s' if section.joint_also else ''} {', '.join(section.partners)}: "
                  f"fedbench-report {shlex.join(joint[0][3:])}", flush=True)
        if args.dry_run:
            continue
        carried = section.selection(args.scale, out)
        if section.after and not carried.is_file():
            record = documented_record(args.paper, args.scale, section.after)
            shortcut = (f", or, to run the choices the document shows without their trials, copy its record "
                        f"{DOC.parent / 'tuned' / record} to {carried}" if record else "")
            print(f"reproduce.py: {args.paper}/{section.name} runs the choices of section '{section.after}', which "
                  f"has no {carried} yet. Fix: run --section "
                  f"{section.after} first (same --scale and --out){shortcut}.", file=sys.stderr)
            status = status or 2
            continue
        try:
            rc = run_command(cmd)
            print(f"== {args.paper}/{section.name}: {'done' if rc == 0 else f'exit status {rc}'}; "
                  f"report in {directory / 'report'}", flush=True)
            status = status or rc
            if rc == 0:
                check_record(args.paper, section, args.scale, directory)
            if joint and rc == 0:  # written even where an earlier section failed
                joint_rc = _joint_report(args.paper, section, *joint)
                status = status or joint_rc
        except Interrupted as stop:
            print(f"== {args.paper}/{section.name}: stopped by {stop.name}; the jobs' checkpoints are written. "
                  f"Rerun the same command to continue it (finished jobs are skipped, the others resume).",
                  file=sys.stderr, flush=True)
            return 128 + stop.signum
    return status


class Interrupted(Exception):
    """This script was asked to stop (SIGINT / SIGTERM) while a command ran; the command has ended since."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum, self.name = signum, signal.Signals(signum).name


def run_command(cmd: List[str]) -> int:
    """Run one ``fedbench-tune`` or ``fedbench-report`` command to its end and return its exit status.

    The command leads a process group of its own, so that a signal sent to this script's group (a terminal's Ctrl-C,
    GNU ``timeout``) does not reach its jobs twice: each SIGINT / SIGTERM this script receives is passed on once, to
    the command's whole group (its joblib workers too), and the script waits for the command, so that whoever
    stopped it finds every job's checkpoint written when it returns. Raises ``Interrupted`` after such a stop."""
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    received: List[int] = []

    def forward(signum, _frame):
        received.append(signum)
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:  # the command has just ended
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if received:
        raise Interrupted(received[0])
    return rc


def _joint_report(paper: str, section: Section, cmd: List[str], report: Path, partners: List[Path]) -> int:
    for name, partner in zip(section.partners, partners):
        if not partner.is_dir():
            print(f"reproduce.py: {paper}/{section.name}'s joint report needs the final runs of section "
                  f"'{name}' ({partner}). Fix: run --section {name} (same --scale and --out), then "
                  f"this section again (its finished jobs are skipped).", file=sys.stderr)
            return 2
    rc = run_command(cmd)
    print(f"== {paper}/{section.name} with {', '.join(section.partners)}: "
          f"{'done' if rc == 0 else f'exit status {rc}'}; report in {report}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
