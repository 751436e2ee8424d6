"""fedbench-tune: search spaces declared with the options (and replaced by presets), equal trial budgets,
selection on validation only (never test), ties to the smaller step, diverged trials, resume, TPE, and the command
end to end."""

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import compose

from fedbench.errors import ConfigError, FedbenchError
from fedbench.tune.cli import _may_change, _plan_directory, _split, make_plan, methods, parser
from fedbench.tune.protocol import Plan, Tuning, check_seeds
from fedbench.tune.select import VALIDATION_COLUMNS, Rule, choose, read_validation
from fedbench.tune.space import Dimension, declared, grid_points, resolve


# -- a fake launcher: run directories as fedbench writes them, with scores a function of the overrides ------------
def fake_launcher(root, outcome, launched):
    """``outcome(params) -> (status, val_accs, test_accs)``; every launched job is recorded in ``launched``."""

    def launch(jobs):
        for job in jobs:
            launched.append(job)
            params = dict(o.split("=", 1) for o in job.overrides)
            status, val, test = outcome(params)
            run = root / job.name
            (run / ".hydra").mkdir(parents=True, exist_ok=True)
            algo = params.get("algo", "fedavg")
            weighting = "uniform" if params.get("participation/selection") == "power_of_choice" else "samples"
            (run / "config.yaml").write_text(yaml.safe_dump({"seed": int(params["seed"]), "algo": {
                "name": algo, "kind": algo, "weighting": weighting}, "client": {"lr": float(params["client.lr"])}}))
            choices = {k: v for k, v in params.items() if k == "algo" or "/" in k}
            (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": choices}}}))
            (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(list(job.overrides)))
            with open(run / "metrics.csv", "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["round", "train_loss", "test_loss", "test_acc", "val_loss", "val_acc"])
                for i, (v, t) in enumerate(zip(val, test)):
                    w.writerow([5 * (i + 1), 1.0, 1 - t, t, 1 - v, v])
            (run / "summary.json").write_text(json.dumps({"status": status, "reason": None}))
    return launch


def plan(algos=("fedavg", "mifa"), trials=2, dims=None, **kw):
    dims = dims or [Dimension("client.lr", [0.3, 0.1, 0.03], log=True, continuous=True)]
    return Plan(overrides=["experiment=smoke"], key="algo", methods=list(algos), trials=trials,
                sampler=kw.pop("sampler", "grid"), select=kw.pop("select", "final"),
                tune_seeds=kw.pop("tune_seeds", [100]), seeds=[0, 1], val_fraction=0.1, batch=kw.pop("batch", 4),
                spaces={a: [d.to_json() for d in (dims[a] if isinstance(dims, dict) else dims)] for a in algos},
                reused=kw.pop("reused", None), reuse_runs=kw.pop("reuse_runs", []))


def test_a_changed_plan_names_the_entries_that_differ_not_whole_records():
    record = {"file": "s.json", "methods": {"fedamd": {"chosen": {"params": {"client.lr": 0.005}}, "trials": [0] * 50}}}
    old = plan(algos=("fedamd",), reused=record)
    other = {**record, "methods": {**record["methods"], "fedavg": {"chosen": {"params": {"client.lr": 0.1}}}}}
    assert old.differences(plan(algos=("fedamd",), reused=other)) == \
        ["reused.methods.fedavg: (absent) -> {'chosen': {'params': {'client.lr': 0.1}}}"]
    changed = plan(algos=("fedamd",), trials=3, reused=record).differences(old)
    assert changed == ["trials: 3 -> 2"]
    assert old.differences(plan(algos=("fedamd",), reused=record)) == []
    assert all(len(d) < 200 for d in old.differences(plan(algos=("fedavg",))))  # a whole record is abridged


def test_selection_reads_only_validation_and_never_chooses_on_test(tmp_path):
    # lr 0.3: the best test accuracy and the worst validation accuracy; lr 0.03: the reverse
    def outcome(p):
        lr = float(p["client.lr"])
        return "completed", [0.5, 0.9 - lr], [0.5, 0.6 + lr]

    launched = []
    t = Tuning(plan(trials=3), tmp_path, fake_launcher(tmp_path, outcome, launched), echo=lambda s: None)
    chosen = t.select()
    assert {a: c["params"] for a, c in chosen.items()} == {"fedavg": {"client.lr": 0.03}, "mifa": {"client.lr": 0.03}}
    run = tmp_path / "trials" / "fedavg" / "t00_seed100"
    assert set(read_validation(run)) == set(VALIDATION_COLUMNS) and not any("test" in c for c in VALIDATION_COLUMNS)
    # the test columns may hold anything: selection never parses them
    text = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("\n".join([text[0]] + [",".join(r.split(",")[:2] + ["garbage", "x"]
                                                                       + r.split(",")[4:]) for r in text[1:]]))
    assert read_validation(run)["val_acc"] == pytest.approx([0.5, 0.6])
    record = json.loads((tmp_path / "selection.json").read_text())
    assert "test set is never used" in record["note"]


def test_every_algorithm_gets_the_same_number_of_trials(tmp_path):
    lr = Dimension("client.lr", [1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001], log=True, continuous=True)
    mu = Dimension("algo.mu", [0.001, 0.01, 0.1, 1.0], log=True, continuous=True)
    for budget, expected in ((5, {"fedavg": 5, "fedprox": 5}), (10, {"fedavg": 7, "fedprox": 10})):
        root = tmp_path / str(budget)
        launched = []
        p = plan(("fedavg", "fedprox"), trials=budget, dims={"fedavg": [lr], "fedprox": [lr, mu]})
        Tuning(p, root, fake_launcher(root, lambda q: ("completed", [0.5], [0.5]), launched),
               echo=lambda s: None).select()
        record = json.loads((root / "selection.json").read_text())["methods"]
        assert {a: r["trials_run"] for a, r in record.items()} == expected
        assert {a: r["budget"] for a, r in record.items()} == {"fedavg": budget, "fedprox": budget}
        assert record["fedprox"]["grid_size"] == 28 and record["fedavg"]["grid_size"] == 7
        # a subset of a larger grid: distinct points, the same draw again
        points = [tuple(t["params"].values()) for t in record["fedprox"]["trials"]]
        assert len(set(points)) == len(points)
        assert grid_points([lr, mu], budget, 100, "fedprox") == [t["params"] for t in record["fedprox"]["trials"]]


def test_ties_go_to_the_smaller_step_and_diverged_trials_score_worst(tmp_path):
    def outcome(p):
        lr = float(p["client.lr"])
        return ("diverged", [0.99], [0.99]) if lr == 0.3 else ("completed", [0.5, 0.8], [0.7, 0.7])

    t = Tuning(plan(trials=3), tmp_path, fake_launcher(tmp_path, outcome, []), echo=lambda s: None)
    chosen = t.select()
    assert chosen["fedavg"]["params"] == {"client.lr": 0.03}  # 0.1 and 0.03 tie at 0.8; 0.3 diverged
    record = json.loads((tmp_path / "selection.json").read_text())["methods"]["fedavg"]
    assert [tr["score"][0] for tr in record["trials"]] == [None, 0.8, 0.8]
    assert t.failed == []  # a diverged trial is a result, not a failure
    trials = [{"index": i, "params": {"client.lr": lr, "algo.mu": mu}, "score": (0.7, 0.0)}
              for i, (lr, mu) in enumerate([(0.1, 0.01), (0.1, 0.001), (0.01, 1.0)])]
    assert choose(trials, ["client.lr"])["index"] == 2  # the smallest step first, then the other keys
    assert choose([{**trials[0], "score": (-math.inf, -math.inf)}], ["client.lr"]) is None


def test_a_method_whose_trials_all_score_the_same_is_flagged(tmp_path):
    def outcome(p):  # fedavg's score does not depend on the searched step (a key that does not reach it), mifa's does
        return "completed", [0.5, 0.8 if p["algo"] == "fedavg" else 0.5 + float(p["client.lr"])], [0.7, 0.7]

    said = []
    Tuning(plan(trials=3), tmp_path, fake_launcher(tmp_path, outcome, []), echo=said.append).select()
    record = json.loads((tmp_path / "selection.json").read_text())["methods"]
    assert record["fedavg"]["warning"] == ("all 3 trials scored the same: the searched keys (client.lr) may not "
                                           "reach fedavg")
    assert "warning" not in record["mifa"]
    assert [s for s in said if "warning" in s] == [f"fedbench-tune: warning: fedavg: {record['fedavg']['warning']}; "
                                                   "check its space (tune_space in the preset, or --space)"]


def test_an_algorithm_without_a_completed_trial_runs_no_finals_and_fails_the_command(tmp_path):
    def outcome(p):
        return ("failed" if p["algo"] == "mifa" else "completed"), [0.6], [0.6]

    launched = []
    t = Tuning(plan(trials=2), tmp_path, fake_launcher(tmp_path, outcome, launched), echo=lambda s: None)
    failed = t.run()
    assert "method mifa (no trial completed)" in failed
    assert any("trials/mifa/t00_seed100" == f for f in failed)
    finals = [j.name for j in launched if j.name.startswith("final/")]
    assert finals == ["final/fedavg_seed0", "final/fedavg_seed1"]
    assert (tmp_path / "report" / "results.md").is_file()


def test_the_finals_report_names_the_runs_it_left_out_on_stderr(tmp_path, capsys):
    def outcome(p):
        return "completed", [0.5 + float(p["client.lr"])], [0.7]

    Tuning(plan(trials=2), tmp_path, fake_launcher(tmp_path, outcome, []), echo=lambda s: None).run()
    assert capsys.readouterr().err == ""
    shutil.copytree(tmp_path / "final" / "fedavg_seed0", tmp_path / "final" / "fedavg_seed0_copy")
    launched = []
    Tuning(plan(trials=2), tmp_path, fake_launcher(tmp_path, outcome, launched), echo=lambda s: None).run()
    err = capsys.readouterr().err
    assert launched == [] and "fedbench-tune: 1 run(s) repeat a seed of their group, left out" in err
    assert str(tmp_path / "final" / "fedavg_seed0_copy") in err


def test_a_choice_that_diverges_on_final_seeds_is_recorded_and_said_with_the_remedy(tmp_path):
    def outcome(p):  # mifa's choice trains on the tuning seed and diverges on final seed 1
        if p["algo"] == "mifa" and p["seed"] == "1":
            return "diverged", [0.5], [0.5]
        return "completed", [0.5 + float(p["client.lr"])], [0.7]

    said = []
    failed = Tuning(plan(trials=2), tmp_path, fake_launcher(tmp_path, outcome, []), echo=said.append).run()
    assert failed == []  # a diverged final is a result, not a failure
    record = json.loads((tmp_path / "selection.json").read_text())["methods"]
    assert record["mifa"]["finals_diverged"] == [1] and "finals_diverged" not in record["fedavg"]
    warning = [s for s in said if "warning" in s]
    assert len(warning) == 1 and warning[0].startswith("fedbench-tune: warning: mifa: its choice (client.lr=0.3) "
                                                       "diverged on final seed(s) 1 of 2")
    assert f"--tune-seeds 100,101 with another --dir and --reuse-runs {tmp_path}," in warning[0]
    said.clear()  # tuned on two seeds already, the remedy adds a third
    Tuning(plan(trials=2, tune_seeds=[100, 101]), tmp_path / "two", fake_launcher(tmp_path / "two", outcome, []),
           echo=said.append).run()
    assert "--tune-seeds 100,101,102 with" in [s for s in said if "warning" in s][0]


def test_finished_runs_stand_for_their_jobs_only_if_they_ran_their_overrides(tmp_path):
    def outcome(p):
        return "completed", [0.5 + float(p["client.lr"]) * int(p["seed"]) / 100], [0.7]

    one = tmp_path / "one"
    Tuning(plan(trials=2), one, fake_launcher(one, outcome, []), echo=lambda s: None).run()
    # a second tuning seed: the first seed's trials copied in are the same jobs, so only the new ones run
    two, launched = tmp_path / "two", []
    for run in (one / "trials").glob("*/t*_seed100"):
        shutil.copytree(run, two / run.relative_to(one))
    overrides = two / "trials" / "mifa" / "t00_seed100" / ".hydra" / "overrides.yaml"
    overrides.write_text(yaml.safe_dump([*yaml.safe_load(overrides.read_text()), "resume=/elsewhere"]))
    assert Tuning(plan(trials=2, tune_seeds=[100, 101]), two, fake_launcher(two, outcome, launched),
                  echo=lambda s: None).run() == []
    assert sorted(j.name for j in launched if j.name.startswith("trials/")) == [
        f"trials/{m}/t0{i}_seed101" for m in ("fedavg", "mifa") for i in (0, 1)]
    # a run of another configuration under a trial's name is refused, naming what it ran
    three = tmp_path / "three"
    shutil.copytree(one, three)
    run = three / "trials" / "fedavg" / "t01_seed100"
    ran = [o.replace("client.lr=", "client.lr=9") if o.startswith("client.lr=") else o
           for o in yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())]
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(ran))
    launched = []
    with pytest.raises(FedbenchError, match=r"t01_seed100 finished under other overrides than its job: it ran "
                                            r"client\.lr=9\S*; the job has client\.lr=\S+\. .*Fix: move it"):
        Tuning(plan(trials=2), three, fake_launcher(three, outcome, launched), echo=lambda s: None).run()
    assert launched == []
    # a run that lacks one of its job's overrides (an older plan's job) is named by what it lacks
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([o for o in ran if not o.startswith("client.lr")]))
    with pytest.raises(FedbenchError, match=r"than its job: the job has client\.lr=\S+\. It was left"):
        Tuning(plan(trials=2), three, fake_launcher(three, outcome, launched), echo=lambda s: None).run()


def test_reuse_runs_copies_the_finished_runs_of_the_same_jobs_and_runs_only_the_others(tmp_path):
    def outcome(p):  # the largest step scores best on every seed, so one and two tuning seeds choose alike
        return "completed", [0.5 + float(p["client.lr"]) * int(p["seed"]) / 1000], [0.7]

    one = tmp_path / "one"
    Tuning(plan(trials=2), one, fake_launcher(one, outcome, []), echo=lambda s: None).run()
    unfinished = one / "trials" / "fedavg" / "t01_seed100" / "summary.json"
    unfinished.write_text(json.dumps({"status": "running", "reason": None}))
    two, launched, said = tmp_path / "two", [], []
    assert Tuning(plan(trials=2, tune_seeds=[100, 101], reuse_runs=[str(one)]), two,
                  fake_launcher(two, outcome, launched), echo=said.append).run() == []
    # the new tuning seed's trials and the run the source left unfinished run; the rest, finals too, are copies
    assert sorted(j.name for j in launched) == ["trials/fedavg/t00_seed101", "trials/fedavg/t01_seed100",
                                                "trials/fedavg/t01_seed101", "trials/mifa/t00_seed101",
                                                "trials/mifa/t01_seed101"]
    copied = json.loads((two / "copied.json").read_text())
    assert sorted(copied) == ["final/fedavg_seed0", "final/fedavg_seed1", "final/mifa_seed0", "final/mifa_seed1",
                              "trials/fedavg/t00_seed100", "trials/mifa/t00_seed100", "trials/mifa/t01_seed100"]
    assert all((two / copied[name]).resolve() == (one / name).resolve() for name in copied)
    assert not any(os.path.isabs(source) for source in copied.values())  # a record names no machine's paths
    assert (two / "final" / "mifa_seed1" / "metrics.csv").read_text() == (
        one / "final" / "mifa_seed1" / "metrics.csv").read_text()
    assert json.loads((two / "selection.json").read_text())["copied_runs"] == copied
    assert any("copied 3 finished run(s)" in s for s in said) and not (two / ".copying").exists()
    # a rerun launches nothing and keeps the record
    launched.clear()
    Tuning(plan(trials=2, tune_seeds=[100, 101], reuse_runs=[str(one)]), two, fake_launcher(two, outcome, launched),
           echo=lambda s: None).run()
    assert launched == [] and json.loads((two / "selection.json").read_text())["copied_runs"] == copied
    # runs are matched by the overrides they ran, not by their names: trial 1 of another space runs anew
    three, launched = tmp_path / "three", []
    other = [Dimension("client.lr", [0.3, 0.01], log=True, continuous=True)]
    Tuning(plan(("mifa",), trials=2, dims=other, reuse_runs=[str(one)]), three,
           fake_launcher(three, outcome, launched), echo=lambda s: None).run()
    assert [j.name for j in launched] == ["trials/mifa/t01_seed100"]
    assert "client.lr=0.01" in launched[0].overrides


def test_the_report_has_one_group_per_method_with_its_chosen_and_own_settings(tmp_path):
    def outcome(p):
        return "completed", [0.5, 0.9 - float(p["client.lr"])], [0.5, 0.6]

    p = plan(("uniform", "power_of_choice", "fedsrc_d_oracle"), trials=3)
    p.key = "participation/selection"
    Tuning(p, tmp_path, fake_launcher(tmp_path, outcome, []), echo=lambda s: None).run()
    results = (tmp_path / "report" / "results.md").read_text()
    assert "| participation/selection=power_of_choice [algo.weighting=uniform, client.lr=0.03] |" in results
    assert "| participation/selection=fedsrc_d_oracle [algo.weighting=samples, client.lr=0.03] |" in results
    pairs = (tmp_path / "report" / "comparisons.md").read_text()
    assert pairs.count("| final test acc |") == 3  # every pair of methods, though they differ in weighting too


def test_from_runs_only_the_finals_at_an_earlier_tunings_choices_and_keeps_its_record(tmp_path):
    def outcome(p):
        return "completed", [0.5, 0.9 - float(p["client.lr"])], [0.5, 0.6]

    Tuning(plan(trials=3), tmp_path / "short", fake_launcher(tmp_path / "short", outcome, []),
           echo=lambda s: None).run()
    earlier = json.loads((tmp_path / "short" / "selection.json").read_text())
    reused = {"file": "short/selection.json", **{k: earlier[k] for k in ("budget", "tune_seeds", "select", "sampler",
                                                                          "val_fraction", "overrides")},
              "methods": {"mifa": earlier["methods"]["mifa"]}}
    longer = plan(("mifa",), trials=3)
    longer.overrides, longer.seeds, longer.reused = ["experiment=smoke", "rounds=20000"], [0, 1, 2], reused
    launched = []
    Tuning(longer, tmp_path / "long", fake_launcher(tmp_path / "long", outcome, launched), echo=lambda s: None).run()
    assert [j.name for j in launched] == ["final/mifa_seed0", "final/mifa_seed1", "final/mifa_seed2"]
    assert all("client.lr=0.03" in j.overrides and "rounds=20000" in j.overrides for j in launched)
    assert not (tmp_path / "long" / "trials").exists()
    record = json.loads((tmp_path / "long" / "selection.json").read_text())
    assert record["methods"]["mifa"] == earlier["methods"]["mifa"] and record["budget"] == 3
    assert record["overrides"] == ["experiment=smoke", "rounds=20000"] and record["seeds"] == [0, 1, 2]
    assert record["selected_under"]["overrides"] == ["experiment=smoke"]
    assert "mifa" in (tmp_path / "long" / "report" / "results.md").read_text()


def test_rerunning_skips_finished_jobs_resumes_interrupted_ones_and_restarts_failed_ones(tmp_path):
    launched = []
    launch = fake_launcher(tmp_path, lambda p: ("completed", [0.6, 0.7], [0.6, 0.7]), launched)
    Tuning(plan(trials=2), tmp_path, launch, echo=lambda s: None).run()
    assert len(launched) == 2 * 2 + 2 * 2  # trials, then finals
    launched.clear()
    Tuning(plan(trials=2), tmp_path, launch, echo=lambda s: None).run()
    assert launched == []
    interrupted, failed = tmp_path / "final" / "mifa_seed1", tmp_path / "trials" / "fedavg" / "t01_seed100"
    (interrupted / "summary.json").write_text(json.dumps({"status": "interrupted"}))
    (interrupted / "checkpoints").mkdir()
    (interrupted / "checkpoints" / "round_000002.pt").write_bytes(b"x")
    (failed / "summary.json").write_text(json.dumps({"status": "failed", "reason": "boom"}))
    Tuning(plan(trials=2), tmp_path, launch, echo=lambda s: None).run()
    assert sorted(j.name for j in launched) == ["final/mifa_seed1", "trials/fedavg/t01_seed100"]
    resumed = next(j for j in launched if j.name == "final/mifa_seed1")
    assert f"resume={interrupted.resolve()}" in resumed.overrides


def test_a_rerun_may_add_methods_whose_jobs_alone_run_and_the_old_choices_stand(tmp_path, capsys):
    """A baseline added to a finished tuning directory gets the same budget; nothing of the others runs again."""
    launched = []
    score = lambda p: ("completed", [0.5, float(p["client.lr"])], [0.5, 0.5])  # noqa: E731 (larger lr wins)
    launch = fake_launcher(tmp_path, score, launched)
    _plan_directory(tmp_path, tmp_path / "tune.json", plan(algos=("fedavg",)))
    Tuning(plan(algos=("fedavg",)), tmp_path, launch, echo=lambda s: None).run()
    before = json.loads((tmp_path / "selection.json").read_text())["methods"]["fedavg"]
    launched.clear()
    grown = plan(algos=("fedavg", "mifa"))
    _plan_directory(tmp_path, tmp_path / "tune.json", grown)
    assert "methods added: mifa" in capsys.readouterr().out
    assert Plan.load(tmp_path / "tune.json").methods == ["fedavg", "mifa"]
    Tuning(grown, tmp_path, launch, echo=lambda s: None).run()
    assert sorted(j.name for j in launched) == ["final/mifa_seed0", "final/mifa_seed1", "trials/mifa/t00_seed100",
                                                "trials/mifa/t01_seed100"]
    after = json.loads((tmp_path / "selection.json").read_text())["methods"]
    assert list(after) == ["fedavg", "mifa"] and after["fedavg"] == before
    assert after["mifa"]["trials_run"] == after["fedavg"]["trials_run"] == 2
    # under --from the carried record holds the added method too: that entry alone is no other plan
    record = {"file": "s.json", "methods": {"fedavg": {"chosen": {"params": {"client.lr": 0.1}}}}}
    more = {**record, "methods": {**record["methods"], "mifa": {"chosen": {"params": {"client.lr": 0.3}}}}}
    carried, grown_carried = plan(algos=("fedavg",), reused=record), plan(algos=("fedavg", "mifa"), reused=more)
    assert carried.differences(grown_carried) and \
        all(_may_change(d, carried, grown_carried) for d in carried.differences(grown_carried))
    assert not all(_may_change(d, grown_carried, carried) for d in grown_carried.differences(carried))
    # a method left out, or anything else changed beside an added method, is another plan
    for other, entry in ((plan(algos=("mifa",)), "methods: ['fedavg', 'mifa'] -> ['mifa']"),
                         (plan(algos=("fedavg", "mifa", "scaffold"), trials=3), "trials: 2 -> 3")):
        with pytest.raises(FedbenchError, match=re.escape(entry)):
            _plan_directory(tmp_path, tmp_path / "tune.json", other)


def test_tpe_runs_the_budget_in_batches_and_resumes_from_the_stored_trials(tmp_path):
    pytest.importorskip("optuna")
    dims = [Dimension("client.lr", [0.001, 1.0], log=True, continuous=True)]
    launched = []
    launch = fake_launcher(tmp_path, lambda p: ("completed", [1 - abs(math.log10(float(p["client.lr"])) + 1)],
                                                [0.5]), launched)
    p = plan(("fedavg",), trials=5, dims=dims, sampler="tpe", batch=2)
    chosen = Tuning(p, tmp_path, launch, echo=lambda s: None).select()
    lrs = [t["client.lr"] for t in json.loads((tmp_path / "trials" / "fedavg" / "trials.json").read_text())]
    assert len(lrs) == 5 and all(0.001 <= lr <= 1.0 for lr in lrs) and len(launched) == 5
    assert chosen["fedavg"]["params"]["client.lr"] == min(lrs, key=lambda lr: abs(math.log10(lr) + 1))
    launched.clear()
    Tuning(p, tmp_path, launch, echo=lambda s: None).select()
    assert launched == []  # the same five trials, read back


def test_selection_rules():
    val = {"round": [5, 10, 15], "val_acc": [0.6, 0.8, 0.7], "val_loss": [0.9, 0.5, 0.6]}
    assert Rule.parse("final").score(val) == (0.7, 0.0)
    assert Rule.parse("best").score(val) == (0.8, 0.0)
    assert Rule.parse("last:2").score(val) == (pytest.approx(0.75), 0.0)
    assert Rule.parse("loss").score(val) == (-0.6, 0.0)
    assert Rule.parse("target:0.75").score(val) == (-10, 0.7)
    assert Rule.parse("target:0.9").score(val) == (-math.inf, 0.7)  # not reached: worst, then final val_acc
    assert Rule.parse("final").score({**val, "val_loss": [0.9, math.nan, 0.6]})[0] == -math.inf
    for bad in ("median", "last:0", "target:1.5", "target:x", "last:"):
        with pytest.raises(FedbenchError, match="--select"):
            Rule.parse(bad)


def test_search_spaces_are_declared_with_the_options_and_presets_replace_them():
    keys = lambda cfg: {d.key: d.values for d in resolve(cfg)}  # noqa: E731
    assert list(keys(compose("experiment=smoke", "algo=fedavg"))) == ["client.lr"]
    assert keys(compose("experiment=smoke", "algo=fedprox"))["algo.mu"] == [0.001, 0.01, 0.1, 1.0]
    assert [d.key for d in declared(compose("algo=fedpage"))] == ["client.lr", "algo.server_lr"]
    fedamd = keys(compose("experiment=fedamd_fmnist_small", "algo=scaffold"))
    assert fedamd == {"client.lr": [0.1, 0.03, 0.02, 0.01, 0.008, 0.005], "algo.server_lr": [1.0, 0.8, 0.1]}
    gradma = keys(compose("experiment=gradma_cifar10_dir0.01_small", "algo=fedprox"))
    assert gradma["algo.mu"] == [0.001, 0.01, 0.1] and gradma["client.lr"] == [0.001, 0.01, 0.1]
    assert keys(compose("experiment=gradma_cifar10_dir0.01_small", "algo=gradma")).keys() == {"client.lr",
                                                                                            "algo.server_lr"}
    assert resolve(compose("algo=fedavg"), {"client.lr": [0.5, 0.05]})[0].values == [0.5, 0.05]


@pytest.mark.parametrize("space, key", [({"client.lr": [0.1, -1.0]}, "client.lr"), ({"algo.mu": [0.1]}, "algo.mu"),
                                        ({"seed": [1, 2]}, "seed"), ({"client.lr": []}, "client.lr"),
                                        ({"client.lr": [0.1, 0.1]}, "client.lr"),
                                        ({"client.lr": [math.inf]}, "client.lr")])
def test_bad_search_spaces_are_refused_naming_the_key(space, key):
    with pytest.raises(ConfigError, match=key.replace(".", "[.]")):
        resolve(compose("algo=fedavg"), space)


def test_methods_can_be_the_values_of_any_option():
    args = parser().parse_args(["--compare", "participation/selection=uniform,md", "--trials", "3"])
    task, hydra_args = _split(["experiment=smoke", "hydra/launcher=joblib"], "participation/selection")
    assert (task, hydra_args) == (["experiment=smoke"], ["hydra/launcher=joblib"])
    p = make_plan(args, *methods(args), task, hydra_args)
    assert (p.key, p.methods) == ("participation/selection", ["uniform", "md"])
    assert [d["key"] for d in p.spaces["md"]] == ["client.lr"]
    t = Tuning(p, Path("/nonexistent"), launch=None)
    assert "participation/selection=md" in t._job("x", "md", {"client.lr": 0.1}, 0).overrides
    with pytest.raises(FedbenchError, match="sets 'participation/selection'"):
        _split(["participation/selection=md"], "participation/selection")
    with pytest.raises(FedbenchError, match="unknown 'nope'"):
        methods(parser().parse_args(["--compare", "participation/selection=uniform,nope"]))


def test_one_algorithms_option_goes_through_its_preset_table():
    """``algo.<key>`` would reach every method's jobs; the error names the per-algorithm form, which passes."""
    with pytest.raises(FedbenchError, match=re.escape("+algo_settings.<algorithm>.<option>=<value>")):
        _split(["algo.p=0.9"], "algo")
    assert _split(["+algo_settings.fedamd.p=0.9"], "algo") == (["+algo_settings.fedamd.p=0.9"], [])


def test_tuning_and_final_seeds_must_differ():
    with pytest.raises(FedbenchError, match="both --tune-seeds and --seeds"):
        check_seeds([100, 1], [0, 1, 2])


def tune(args, cwd, timeout=600):
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "fedbench.tune.cli", *args], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=timeout)


SMOKE = ["experiment=smoke", "logger=csv", "rounds=6", "eval_every=3"]


def test_fedbench_tune_end_to_end_then_resumes_without_rerunning(tmp_path):
    out = tmp_path / "tune"
    args = [*SMOKE, f"data.root={tmp_path / 'data'}", "top_k=[2]", "--algos", "fedavg,mifa", "--trials", "2",
            "--seeds", "0,1", "--dir", str(out)]
    proc = tune(args, tmp_path)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    selection = json.loads((out / "selection.json").read_text())
    assert {a: r["trials_run"] for a, r in selection["methods"].items()} == {"fedavg": 2, "mifa": 2}
    for algo, record in selection["methods"].items():
        chosen = record["chosen"]
        for seed in (0, 1):
            run = out / "final" / f"{algo}_seed{seed}"
            assert json.loads((run / "summary.json").read_text())["status"] == "completed"
            config = yaml.safe_load((run / "config.yaml").read_text())
            assert config["client"]["lr"] == chosen["params"]["client.lr"] and config["data"]["val_fraction"] == 0.1
    results = (out / "report" / "results.md").read_text()
    assert "algo=fedavg [client.lr=" in results and "algo=mifa [client.lr=" in results
    assert "top-2 acc" in results  # the top-k the runs declare, as a preset does (FedSRC's: 5 and 10)
    assert "algo=" in (out / "report" / "comparisons.md").read_text().split("| verdict |")[1]
    assert "Traceback" not in text
    again = tune(args, tmp_path)
    assert again.returncode == 0 and "launching" not in again.stdout, again.stdout + again.stderr
    changed = tune([*args, "--trials", "3"], tmp_path)
    assert changed.returncode == 2 and "started with another plan (trials: 2 -> 3)" in changed.stderr
    assert f"--reuse-runs {out}" in changed.stderr
    own = tune([*args, "--reuse-runs", str(out)], tmp_path)
    assert own.returncode == 2 and "it is this tuning's own --dir" in own.stderr, own.stderr
    # a second tuning seed in a new directory: the first seed's trials and the finals are copied, not rerun
    wider = tune([*args[:-1], str(tmp_path / "wider"), "--tune-seeds", "100,101", "--reuse-runs", str(out)], tmp_path)
    assert wider.returncode == 0, wider.stdout + wider.stderr
    copied = json.loads((tmp_path / "wider" / "selection.json").read_text())["copied_runs"]
    assert {"trials/fedavg/t00_seed100", "trials/mifa/t01_seed100"} <= set(copied)
    assert not any("seed101" in name for name in copied)


@pytest.mark.parametrize("args, message", [
    (["--algos", "fedavg", "--tune-seeds", "0", "--seeds", "0,1"], "both --tune-seeds and --seeds"),
    (["--algos", "fedavg", "seed=3"], "Fix: use --seeds"),
    (["--algos", "fedavg", "client.lr=0.1,0.2"], "--space client.lr="),
    (["--algos", "fedavg,nope"], "unknown 'nope'"),
    (["--algos", "fedavg", "--space", "algo.mu=0.1,1"], "no option 'algo.mu'"),
    (["--algos", "fedavg", "--select", "median"], "Invalid --select"),
    (["--algos", "fedavg", "client.lrr=0.1"], "Unknown key 'lrr'"),
    (["--algos", "fedavg", "--reuse-runs", "nowhere"], "Invalid --reuse-runs nowhere: not a tuning directory (no "
                                                       "tune.json; no such folder)"),
])
def test_bad_tune_commands_stop_before_any_job_with_a_clear_error(tmp_path, args, message):
    proc = tune(["experiment=smoke", *args, "--dir", str(tmp_path / "t")], tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "t" / "trials").exists()


def earlier_selection(path, compared="algo"):
    """A selection.json as fedbench-tune writes it: fedavg chose client.lr=0.05 on seed 100, mifa had no choice."""
    trial = {"index": 1, "params": {"client.lr": 0.05}, "overrides": ["client.lr=0.05"], "score": [0.7, 0.0]}
    method = {"space": [{"key": "client.lr", "values": [0.1, 0.05], "log": True, "continuous": False}], "budget": 2,
              "grid_size": 2, "trials_run": 2, "trials": [trial], "chosen": trial}
    path.write_text(json.dumps({"select": "final", "sampler": "grid", "budget": 2, "tune_seeds": [100], "seeds": [0],
                                "val_fraction": 0.1, "overrides": ["experiment=smoke"], "compared": compared,
                                "methods": {"fedavg": method, "mifa": {**method, "chosen": None}}}))
    return path


def test_fedbench_tune_from_an_earlier_selection_runs_its_choice_under_new_overrides(tmp_path):
    earlier = earlier_selection(tmp_path / "selection.json")
    out = tmp_path / "long"
    proc = tune([*SMOKE, "rounds=8", f"data.root={tmp_path / 'data'}", "--algos", "fedavg", "--from", str(earlier),
                 "--seeds", "0", "--dir", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "phase 1 skipped" in proc.stdout and not (out / "trials").exists()
    config = yaml.safe_load((out / "final" / "fedavg_seed0" / "config.yaml").read_text())
    assert config["client"]["lr"] == 0.05 and config["rounds"] == 8 and config["data"]["val_fraction"] == 0.1
    record = json.loads((out / "selection.json").read_text())
    assert record["selected_under"]["file"] == "selection.json" and record["budget"] == 2  # from the command's cwd
    # the same command from another folder spells --from's file otherwise: the same plan, continued, nothing rerun
    (tmp_path / "elsewhere").mkdir()
    ran = (out / "final" / "fedavg_seed0" / "metrics.csv").stat().st_mtime_ns
    again = tune([*SMOKE, "rounds=8", f"data.root={tmp_path / 'data'}", "--algos", "fedavg", "--from", str(earlier),
                  "--seeds", "0", "--dir", str(out)], tmp_path / "elsewhere")
    assert again.returncode == 0 and f"continuing {out}" in again.stdout, again.stdout + again.stderr
    assert (out / "final" / "fedavg_seed0" / "metrics.csv").stat().st_mtime_ns == ran


@pytest.mark.parametrize("args, message", [
    (["--algos", "fedavg", "--trials", "3"], "--trials does not apply with --from"),
    (["--algos", "fedavg", "--space", "client.lr=0.1"], "--space does not apply with --from"),
    (["--algos", "fedavg", "--seeds", "100"], "both --tune-seeds and --seeds"),
    (["--algos", "fedavg,mifa"], "no choice for algo=mifa. Allowed: fedavg"),
    (["--compare", "participation/selection=uniform"], "it compared algo, this command compares "
                                                        "participation/selection"),
])
def test_bad_from_commands_stop_before_any_job_with_a_clear_error(tmp_path, args, message):
    proc = tune(["experiment=smoke", *args, "--from", str(earlier_selection(tmp_path / "s.json")), "--dir",
                 str(tmp_path / "t")], tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "t" / "final").exists()


def test_from_a_file_that_is_not_a_selection_is_refused(tmp_path):
    (tmp_path / "s.json").write_text("{}")
    for path in (tmp_path / "s.json", tmp_path / "missing.json"):
        proc = tune(["experiment=smoke", "--algos", "fedavg", "--from", str(path), "--dir", str(tmp_path / "t")],
                    tmp_path)
        assert proc.returncode == 2 and f"Invalid --from {path}" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_tuning_directory_has_one_fedbench_tune_at_a_time(tmp_path):
    from fedbench.lock import RunLock

    with RunLock(tmp_path / "t"):
        proc = tune(["experiment=smoke", "--algos", "fedavg", "--dir", str(tmp_path / "t")], tmp_path)
    assert proc.returncode == 2 and f"pid {os.getpid()}" in proc.stderr and "Traceback" not in proc.stderr, \
        proc.stderr
    assert not (tmp_path / "t" / "tune.json").exists()


@pytest.mark.slow
def test_fedbench_tune_through_the_joblib_launcher(tmp_path):
    out = tmp_path / "tune"
    proc = tune([*SMOKE, f"data.root={tmp_path / 'data'}", "hydra/launcher=joblib", "engine.num_threads=1",
                 "--algos", "fedavg,fedprox", "--trials", "2", "--seeds", "0,1", "--dir", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((out / "selection.json").read_text())["methods"]
    assert record["fedprox"]["trials_run"] == record["fedavg"]["trials_run"] == 2
    assert len(list((out / "final").glob("*/summary.json"))) == 4



def test_fedbench_tune_through_the_packed_launcher(tmp_path):
    """The trials of a tuning batch train as packs (hydra/launcher=packed), each with its own summary."""
    out = tmp_path / "tune"
    proc = tune([*SMOKE, f"data.root={tmp_path / 'data'}", "hydra/launcher=packed", "--algos", "fedavg,fedprox",
                 "--trials", "2", "--seeds", "0,1", "--dir", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((out / "selection.json").read_text())["methods"]
    assert record["fedprox"]["trials_run"] == record["fedavg"]["trials_run"] == 2
    finals = [json.loads(p.read_text()) for p in (out / "final").glob("*/summary.json")]
    assert len(finals) == 4 and all(s["status"] == "completed" for s in finals)
    assert max(s["packed_jobs"] for s in finals) > 1


@pytest.mark.parametrize("space, message", [({"fedavgg": {"client.lr": [0.1]}}, "tune_space.fedavgg"),
                                            ({"*": {"client.lr": []}}, "tune_space[.][*]"),
                                            ({"fedavg": [0.1]}, "tune_space.fedavg")])
def test_a_presets_tune_space_is_checked_on_every_run(space, message):
    from fedbench.config.presets import apply_presets

    cfg = compose("experiment=smoke")
    cfg.tune_space = space
    with pytest.raises(ConfigError, match=message):
        apply_presets(cfg, set())
