"""fedbench-report on a synthetic multirun (written here, not by runs): grouping by config differences except the
seed, tables recomputed from metrics.csv (checked against numpy here), failed / diverged runs flagged, files."""

import html
import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fedbench.report import main, report

from conftest import write_fake_run as _write_run, write_fake_sweep

ACCS = {("fedavg", 0): [0.3, 0.5, 0.6, 0.65], ("fedavg", 1): [0.35, 0.45, 0.62, 0.7],
        ("fedavg", 2): [0.2, 0.55, 0.71, 0.69], ("mifa", 0): [0.4, 0.6, 0.72, 0.8],
        ("mifa", 1): [0.45, 0.65, 0.75, 0.78], ("fedprox", 0): [0.3, 0.4, 0.5, 0.55]}


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "multirun"
    for k, ((algo, seed), acc) in enumerate(ACCS.items()):
        _write_run(root / str(k), algo, seed, acc)
    _write_run(root / "6", "mifa", 2, [0.4, math.nan], status="diverged", reason="non-finite test loss at round 20")
    _write_run(root / "7", "fedprox", 1, [], error="ValueError: boom")
    (root / "0" / ".hydra").mkdir()
    (root / "0" / ".hydra" / "config.yaml").write_text("seed: 0\n")  # Hydra's copy: not a run
    return root


def _parse_md(path):
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, [c.strip() for c in ln.strip("|").split("|")])) for ln in lines[2:]]


def _pair(cell):
    """(mean, std or None, its notes) of a cell such as '1,234 ± 56 (2/3; median 1,300)'."""
    notes = cell.split("(")[1].rstrip(")") if "(" in cell else None
    parts = [float(x.replace(",", "")) for x in cell.split("(")[0].split("±")]
    return parts[0], parts[1] if len(parts) > 1 else None, notes


def _check(cell, values, notes=None):
    mean, std, got = _pair(cell)
    assert mean == pytest.approx(np.mean(values), rel=5e-4)
    assert std == (pytest.approx(np.std(values, ddof=1), rel=0.05) if len(values) > 1 else None)
    assert got == notes


def test_report_groups_by_config_but_seed_and_recomputes_the_tables(sweep):
    out = report([sweep]).folder
    for name in ("results.md", "results.tex", "participation.md", "report.json", "index.html", "curves_round.png",
                 "curves_round.pdf", "curves_grad_evals.png", "curves_floats.pdf"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    rows = {r["group"]: r for r in _parse_md(out / "results.md")}
    assert set(rows) == {"algo=fedavg", "algo=mifa", "algo=fedprox"}  # algo.mu only varies with algo.name
    for algo in ("fedavg", "mifa"):
        accs = [a for (g, _), a in ACCS.items() if g == algo]
        _check(rows[f"algo={algo}"]["final acc"], [a[-1] for a in accs])
        _check(rows[f"algo={algo}"]["best acc"], [max(a) for a in accs])
    # to 0.7: fedavg seed 1 at round 40, seed 2 at round 30, seed 0 never (2 of 3 reached): the mean is the two
    # reaching runs', the Kaplan-Meier median counts seed 0 censored at its last round, 40: S(30) = 2/3, S(40) = 1/3
    _check(rows["algo=fedavg"]["rounds to 0.7"], [40, 30], "2/3; median 40")
    _check(rows["algo=fedavg"]["grads to 0.7"], [160 * 40, 160 * 30], "median 6,400")
    _check(rows["algo=fedavg"]["floats to 0.7"], [2000 * 40, 2000 * 30], "median 80,000")
    _check(rows["algo=mifa"]["rounds to 0.5"], [20, 20])
    _check(rows["algo=fedavg"]["wall s"], [60, 61, 62])
    assert rows["algo=mifa"]["seeds"] == "2/3" and "diverged (seed 2): non-finite test loss" in rows["algo=mifa"]["flags"]
    assert rows["algo=fedprox"]["seeds"] == "1/2" and "failed (seed 1): ValueError: boom" in rows["algo=fedprox"]["flags"]
    _check(rows["algo=fedprox"]["final acc"], [0.55])  # one seed: no std
    assert rows["algo=fedprox"]["rounds to 0.7"] == "— (0/1)"
    # standard JSON: a non-finite figure (the diverged seed, the targets never reached) is null, never NaN
    data = json.loads((out / "report.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in report.json"))
    assert sum(len(g["members"]) for g in data["groups"]) == 8
    part = (out / "participation.md").read_text()
    fedavg = next(ln for ln in part.splitlines() if ln.startswith("| algo=fedavg"))
    _check(fedavg.split("|")[2], [20, 21, 22])  # mean available per round over seeds 0, 1, 2
    _check(fedavg.split("|")[4], [9.5, 9.5, 9.5])
    assert "trace" in part
    tex = (out / "results.tex").read_text()
    assert r"\begin{tabular}" in tex and r"$\pm$" in tex and "algo=fedavg" in tex
    page = (out / "index.html").read_text()
    assert "curves_round.png" in page and "algo=mifa" in page and "boom" in page
    # results, paired comparisons, paired costs to a target, participation (the browser test counts them too)
    assert page.count("<table>") == 4 and "Cost to a target" in page


def test_group_by_and_targets_options_and_errors(sweep, tmp_path, capsys):
    assert main([str(sweep), "--group-by", "participation.name", "--targets", "0.6", "--out",
                 str(tmp_path / "r")]) == 0
    rows = _parse_md(tmp_path / "r" / "results.md")
    assert [r["group"] for r in rows] == ["participation=markov"] and "rounds to 0.6" in rows[0]
    assert rows[0]["seeds"] == "6/8"
    capsys.readouterr()
    for args, message in ((["--group-by", "algo.nme"], "--group-by algo.nme is not a key of any run's config (did you "
                                                         "mean algo.name"),
                          (["--tuned", "client.lrr"], "--tuned client.lrr"),
                          (["--targets", "1.5"], "--targets 1.5: a target is a test accuracy"),
                          (["--targets", "0"], "--targets 0:"), (["--targets", "nan"], "--targets nan:"),
                          (["--out", "/proc/nope"], "cannot write the report in /proc/nope")):
        assert main([str(sweep), *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("fedbench-report: error: ") and message in err and "Traceback" not in err, err
    assert main([str(tmp_path / "r")]) == 2 and "no runs" in capsys.readouterr().err


def _damage(root):
    """One run of the sweep damaged in each way a file can be: (run, what the listing must say)."""
    cases = {"0": (lambda d: (d / "summary.json").unlink(), "summary.json is missing"),
             "1": (lambda d: (d / "summary.json").write_text('{"status": "compl'), "summary.json is not valid JSON"),
             "2": (lambda d: (d / "metrics.csv").write_bytes(b"round,test_acc\n10,0.5\xff\xfe\n"),
                   "metrics.csv is not UTF-8"),
             "3": (lambda d: (d / "summary.json").write_text("[1, 2]"), "summary.json is not a JSON object"),
             "4": (lambda d: (d / "metrics.csv").write_text("step,acc\n1,0.5\n"), "metrics.csv has no 'round' column"),
             "5": (lambda d: (d / "config.yaml").unlink(), "config.yaml is missing"),
             "6": (lambda d: (d / "config.yaml").write_text("seed: [unclosed\n"), "config.yaml is not valid YAML"),
             "7": (lambda d: (d / "rounds.csv").write_text("round,available\n1,x\n2,3\n"),
                   "rounds.csv line 2: available='x' is not a number"),
             "8": (lambda d: (d / "config.yaml").write_bytes(b"\x89PNG\r\n\x1a\n"), "config.yaml is not UTF-8")}
    for name, (damage, _) in cases.items():
        damage(root / name)
    return {name: why for name, (_, why) in cases.items()}


def test_a_damaged_sweep_is_reported_listing_the_unreadable_runs(tmp_path, capsys):
    root = tmp_path / "multirun"
    for k in range(12):
        _write_run(root / str(k), "fedavg" if k % 2 else "mifa", k // 2, [0.3, 0.5, 0.6, 0.65 + k / 100])
    (root / "11" / "summary.json").write_text(json.dumps({"status": "completed", "rounds": 40}))
    with open(root / "11" / "metrics.csv", "rb+") as f:  # truncated after round 30's row: the summary says 40
        f.truncate(len(f.read().rsplit(b"\n", 2)[0]) + 1)
    reasons = {**_damage(root), "11": "metrics.csv ends at round 30, but summary.json says the run completed 40"}
    assert main([str(root)]) == 1
    err = capsys.readouterr().err
    page = (root / "report" / "index.html").read_text()
    listed = json.loads((root / "report" / "report.json").read_text())["unreadable"]
    assert len(listed) == len(reasons) and "Unreadable runs" in page and "Traceback" not in err
    for name, why in reasons.items():
        path = str((root / name).resolve())
        assert any(u["path"] == path and why in u["reason"] for u in listed), (name, listed)
        assert html.escape(why) in page and why in err
    readable = {m for g in json.loads((root / "report" / "report.json").read_text())["groups"] for m in g["members"]}
    assert readable == {str((root / n).resolve()) for n in ("9", "10")}
    assert "Unreadable runs (left out)" in (root / "report" / "results.md").read_text()


def test_a_torn_last_line_of_a_stopped_run_is_not_damage(tmp_path):
    root = tmp_path / "multirun"
    _write_run(root / "0", "fedavg", 0, [0.3, 0.5, 0.6], status="interrupted", reason="SIGTERM at round 30")
    with open(root / "0" / "metrics.csv", "a") as f:
        f.write("40,0.7")  # the row being written when the run stopped
    assert main([str(root), "--out", str(tmp_path / "r")]) == 0


def test_a_seed_run_twice_in_a_group_counts_once_and_the_repeat_is_listed(tmp_path, capsys):
    """A copy beside its original (fedbench-tune --reuse-runs, two sections reported together) or a rerun of the
    same configuration weighs one seed, never two, in the means, intervals and pairs."""
    root = tmp_path / "sweeps"
    write_fake_sweep(root / "a", {"fedavg": [[0.3, 0.5, 0.6], [0.4, 0.6, 0.8]], "mifa": [[0.4, 0.6, 0.7]] * 2})
    shutil.copytree(root / "a" / "0", root / "b" / "copy")  # fedavg seed 0, the same metrics
    _write_run(root / "b" / "rerun", "mifa", 1, [0.2, 0.3, 0.5])  # mifa seed 1 again, other metrics
    assert main([str(root / "a"), str(root / "b"), "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "2 run(s) repeat a seed of their group, left out" in err
    assert str(root / "b" / "copy") in err and str(root / "b" / "rerun") in err  # each one named, as unreadable ones
    rows = {r["group"]: r for r in _parse_md(tmp_path / "r" / "results.md")}
    assert rows["algo=fedavg"]["seeds"] == "2/2" and rows["algo=mifa"]["seeds"] == "2/2"
    _check(rows["algo=fedavg"]["final acc"], [0.6, 0.8])
    _check(rows["algo=mifa"]["final acc"], [0.7, 0.7])  # the first by path of seed 1 kept, not the rerun
    listed = {Path(r["path"]).name: r["reason"] for r in json.loads((tmp_path / "r" / "report.json").read_text())
              ["repeated"]}
    assert set(listed) == {"copy", "rerun"}
    assert "the same metrics as" in listed["copy"] and str(root / "a" / "0") in listed["copy"]
    assert "metrics differ from" in listed["rerun"] and "seed 1 of group algo=mifa" in listed["rerun"]
    assert "Repeated seeds (left out)" in (tmp_path / "r" / "results.md").read_text()
    page = (tmp_path / "r" / "index.html").read_text()
    assert "Repeated seeds" in page and "4 runs in 2 groups" in page
    written = report([root / "a", root / "b"], out=tmp_path / "again")  # what the caller is told, not re-read
    assert written.folder == tmp_path / "again" and written.unreadable == ()
    assert {Path(p).name: why for p, why in written.repeated} == listed


@pytest.mark.slow
def test_index_html_renders_in_a_headless_browser(sweep, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Chromium is not installed (CI installs the Debian package)")
    out = report([sweep]).folder
    (out / "curves_floats.png").unlink()  # a broken image must show as such
    args = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*args, "--dump-dom", (out / "index.html").as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    # results, paired comparisons, paired costs to a target, participation
    assert dom.count("<table>") == 4 and "algo=mifa" in dom and "diverged (seed 2)" in dom
    assert "Paired comparisons" in dom and "Cost to a target" in dom
    assert "not distinguishable at n=2" in dom and "one seed: no interval" in dom
    assert "image missing: profile.png" not in dom
    assert "image missing: curves_floats.png" in dom
    assert "image missing: curves_round.png" not in dom and "image missing: trace_1.png" not in dom
    shot = tmp_path / "page.png"
    subprocess.run([*args, f"--screenshot={shot}", "--window-size=1400,2000", (out / "index.html").as_uri()],
                   capture_output=True, timeout=120)
    assert shot.stat().st_size > 20_000  # a rendered page with tables and figures, not a blank one


def test_labels_leave_out_keys_that_come_with_a_nested_option(tmp_path):
    from fedbench.report import Run, group_runs

    def run(kind, mode, lr, seed):
        selection = {"kind": kind, "mode": mode, "clients_per_round": 10}
        return Run(tmp_path / f"{kind}{lr}{seed}", {"seed": seed, "client.lr": lr, "participation.name": "uniform",
                   **{f"participation.selection.{k}": v for k, v in selection.items()}}, {}, {}, "completed", None, 1.0)

    runs = [run(k, m, lr, s) for k, m in (("uniform", None), ("fedsrc_d", "oracle")) for lr in (0.1, 0.2)
            for s in (0, 1)]
    labels = sorted(g.label for g in group_runs(runs))
    assert labels == [f"client.lr={lr}, participation.selection={k}" for lr in (0.1, 0.2)
                      for k in ("fedsrc_d", "uniform")]


def test_grouped_by_a_key_the_labels_show_the_settings_that_come_with_each_group(tmp_path):
    from fedbench.report import Run, group_runs

    def run(kind, lr, seed):  # Power-of-Choice with its paper's simple average, the others sample-weighted
        weighting = "uniform" if kind == "power_of_choice" else "samples"
        return Run(tmp_path / f"{kind}{lr}{seed}", {"seed": seed, "client.lr": lr, "algo.weighting": weighting,
                   "choice.participation/selection": kind, "participation.selection.kind": kind},
                   {}, {}, "completed", None, 1.0)

    runs = [run(k, lr, s) for k in ("uniform", "power_of_choice") for lr in (0.1, 0.2) for s in (0, 1)]
    labels = sorted(g.label for g in group_runs(runs, ["choice.participation/selection"]))
    assert labels == ["participation/selection=power_of_choice [algo.weighting=uniform]",
                      "participation/selection=uniform [algo.weighting=samples]"]  # client.lr varies within one
    labels = sorted(g.label for g in group_runs(runs, ["choice.participation/selection"], ["client.lr"]))
    assert labels == ["participation/selection=power_of_choice [algo.weighting=uniform, client.lr=0.1/0.2]",
                      "participation/selection=uniform [algo.weighting=samples, client.lr=0.1/0.2]"]
    assert [g.label for g in group_runs(runs, ["algo.weighting"])] == [  # the sampler comes with the weighting
        "algo.weighting=uniform [participation.selection.kind=power_of_choice]",
        "algo.weighting=samples [participation.selection.kind=uniform]"]


def test_keys_a_resume_may_change_never_separate_groups(tmp_path):
    from fedbench.report import Run, group_runs
    from fedbench.runs import RESUME_FREE
    from fedbench.tree import under

    assert under("logger.wandb.mode", ["logger"]) and under("top_k", ["top_k"]) and not under("top_kx", ["top_k"])
    free = {"logger.wandb.mode": ["offline", "online"], "checkpoint_every": [0, 50], "engine.num_threads": [1, 2],
            "top_k": [[5], [5, 10]], "resume": [False, True], "checkpoint_keep": [1, 3],
            "hydra.job.num": [0, 1], "choice.logger": ["csv", "wandb"]}
    assert {k.split(".")[0] for k in free} >= {k.split(".")[0] for k in RESUME_FREE}
    runs = [Run(tmp_path / f"{lr}{seed}", {"seed": seed, "client.lr": lr, **{k: v[seed] for k, v in free.items()}},
                {}, {}, "completed", None, 1.0) for lr in (0.1, 0.2) for seed in (0, 1)]
    assert sorted(g.label for g in group_runs(runs)) == ["client.lr=0.1", "client.lr=0.2"]


def test_loss_targets_are_reached_at_or_below_and_compared_paired(tmp_path, capsys):
    """A loss target (the global training loss, engine.eval_train) is reached at the first evaluation at or below
    it; by default the runs' own loss_targets; its costs get columns and paired comparisons like an accuracy's."""
    root = tmp_path / "sweep"
    # to a loss of 0.8 (evaluations at rounds 10-40): fast at round 20 on every seed, slow at 30, 40, 40
    losses = {"fast": [[1.5, 0.8, 0.6, 0.5]] * 3, "slow": [[1.5, 1.0, 0.8, 0.7], [1.5, 1.0, 0.9, 0.8],
                                                       [1.5, 1.1, 0.85, 0.75]]}
    write_fake_sweep(root, {algo: [{"acc": [0.1, 0.2, 0.3, 0.4], "global_loss": loss} for loss in runs]
                            for algo, runs in losses.items()}, config={"loss_targets": [0.6, 0.8]})
    out = report([root]).folder
    rows = {r["group"]: r for r in _parse_md(out / "results.md")}
    _check(rows["algo=fast"]["rounds to loss 0.8"], [20, 20, 20])
    _check(rows["algo=slow"]["rounds to loss 0.8"], [30, 40, 40])
    assert rows["algo=slow"]["rounds to loss 0.6"] == "— (0/3)"
    assert list(rows["algo=fast"]).index("rounds to loss 0.8") < list(rows["algo=fast"]).index("rounds to loss 0.6")
    data = json.loads((out / "report.json").read_text())
    assert data["loss_targets"] == [0.8, 0.6] and data["targets"] == [0.5, 0.7]
    cost = next(c for c in data["cost_comparisons"] if c["score"] == "rounds to loss 0.8")
    assert cost["mean_diff"] == pytest.approx(-50 / 3) and cost["verdict"] == "algo=fast cheaper"
    six = next(c for c in data["cost_comparisons"] if c["score"] == "rounds to loss 0.6")
    assert six["censored_b"] == 3 and six["mean_diff"] == pytest.approx(-10)  # slow censored at round 40
    # --loss-targets overrides the runs' own; bad values and runs without the loss are errors, not empty columns
    assert main([str(root), "--loss-targets", "1.0", "--out", str(tmp_path / "r")]) == 0
    assert "rounds to loss 1 " in (tmp_path / "r" / "results.md").read_text()
    plain = tmp_path / "plain"
    _write_run(plain / "0", "a", 0, [0.1, 0.2, 0.5, 0.6])
    capsys.readouterr()
    for args, message in ((["--loss-targets", "0"], "--loss-targets 0: a loss target is a global training loss"),
                          (["--loss-targets", "nan"], "--loss-targets nan:")):
        assert main([str(root), *args]) == 2 and message in capsys.readouterr().err
    assert main([str(plain), "--loss-targets", "0.5"]) == 2
    assert "no run evaluated the global training loss" in capsys.readouterr().err


def test_top_k_is_the_mean_of_the_k_highest_evaluations_and_compared_paired(sweep, tmp_path, capsys):
    """--top-k K: FedSRC's "mean of maximum 5 accuracies", a column per K and paired comparisons like the best
    accuracy's; a K above a completed run's evaluations, or below 1, is an error, never a mean of fewer."""
    assert main([str(sweep), "--top-k", "3", "2", "--out", str(tmp_path / "r")]) == 0
    out = tmp_path / "r"
    rows = {r["group"]: r for r in _parse_md(out / "results.md")}
    # fedavg seed 0 [0.3, 0.5, 0.6, 0.65]: top-2 (0.6 + 0.65) / 2, top-3 (0.5 + 0.6 + 0.65) / 3
    _check(rows["algo=fedavg"]["top-2 acc"], [(0.6 + 0.65) / 2, (0.62 + 0.7) / 2, (0.71 + 0.69) / 2])
    _check(rows["algo=fedavg"]["top-3 acc"],
           [(0.5 + 0.6 + 0.65) / 3, (0.45 + 0.62 + 0.7) / 3, (0.55 + 0.71 + 0.69) / 3])
    _check(rows["algo=mifa"]["top-2 acc"], [(0.72 + 0.8) / 2, (0.75 + 0.78) / 2])  # the diverged seed left out
    assert list(rows["algo=mifa"])[:6] == ["group", "seeds", "final acc", "best acc", "top-2 acc", "top-3 acc"]
    data = json.loads((out / "report.json").read_text())
    assert data["top_k"] == [2, 3]
    pair = next(c for c in data["comparisons"] if c["score"] == "top-2 mean test acc" and {c["a"], c["b"]} == {
        "algo=fedavg", "algo=mifa"})
    fedavg, mifa = ((0.6 + 0.65) / 2, (0.62 + 0.7) / 2), ((0.72 + 0.8) / 2, (0.75 + 0.78) / 2)  # seeds 0 and 1
    sign = 1 if pair["a"] == "algo=fedavg" else -1
    assert pair["n"] == 2 and pair["mean_diff"] == pytest.approx(sign * np.mean(np.subtract(fedavg, mifa)))
    assert "top-3 mean test acc" in (out / "comparisons.md").read_text()
    assert "top-2 acc" in (out / "index.html").read_text() and "top-2 acc" in (out / "results.tex").read_text()
    assert "top" not in (report([sweep]).folder / "results.md").read_text()  # without --top-k, as before
    capsys.readouterr()
    assert main([str(sweep), "--top-k", "0"]) == 2
    assert "--top-k 0: k is a number of evaluations, at least 1" in capsys.readouterr().err
    assert main([str(sweep), "--top-k", "5"]) == 2  # every completed run has 4 evaluations
    err = capsys.readouterr().err
    assert "--top-k 5: the completed run" in err and "only 4 evaluations" in err and "at most 4" in err


def test_the_accuracy_at_best_validation_is_picked_on_validation_and_compared_where_every_run_has_one(tmp_path):
    """The test accuracy at each run's evaluation of highest val_acc (the earliest of ties), whatever the test curve
    does: a column where runs held out a validation split, compared seed by seed only between groups whose runs all
    did (a group without one shows "—" and is left out of that score's comparisons, never compared on nan)."""
    fedavg = [{"acc": [0.3, 0.6, 0.5, 0.55], "val": [0.32, 0.58, 0.6, 0.6]},  # tie at 0.6: the first, test 0.5
              {"acc": [0.4, 0.7, 0.62, 0.6], "val": [0.45, 0.66, 0.6, 0.61]},  # test 0.7
              {"acc": [0.2, 0.5, 0.64, 0.66], "val": [0.2, 0.5, 0.6, 0.7]}]  # test 0.66
    mifa = [{"acc": [0.4, 0.65, 0.6, 0.7], "val": [0.4, 0.6, 0.62, 0.61]},  # test 0.6, though 0.7 is the best
            {"acc": [0.5, 0.6, 0.8, 0.75], "val": [0.5, 0.6, 0.7, 0.74]},  # test 0.75
            {"acc": [0.3, 0.5, 0.6, 0.65], "val": [0.3, 0.5, 0.66, 0.6]}]  # test 0.6
    write_fake_sweep(tmp_path / "m", {"fedavg": fedavg, "mifa": mifa, "fedprox": [[0.3, 0.4, 0.5, 0.55]] * 3})
    out = report([tmp_path / "m"]).folder
    rows = {r["group"]: r for r in _parse_md(out / "results.md")}
    _check(rows["algo=fedavg"]["acc at best val"], [0.5, 0.7, 0.66])
    _check(rows["algo=mifa"]["acc at best val"], [0.6, 0.75, 0.6])
    assert rows["algo=fedprox"]["acc at best val"] == "—"
    data = json.loads((out / "report.json").read_text())
    scored = [c for c in data["comparisons"] if c["score"] == "test acc at best val acc"]
    assert [{c["a"], c["b"]} for c in scored] == [{"algo=fedavg", "algo=mifa"}]
    sign = 1 if scored[0]["a"] == "algo=fedavg" else -1
    assert scored[0]["n"] == 3 and scored[0]["mean_diff"] == pytest.approx(sign * np.mean([-0.1, -0.05, 0.06]))
    assert "picks it on validation" in (out / "comparisons.md").read_text()
    assert all("acc at best val" in (out / name).read_text() for name in ("index.html", "results.tex"))
    sweep = tmp_path / "plain"
    write_fake_sweep(sweep, {"fedavg": [[0.3, 0.5, 0.6, 0.65]] * 2, "mifa": [[0.4, 0.6, 0.7, 0.8]] * 2})
    plain = report([sweep]).folder
    assert "best val" not in (plain / "results.md").read_text() + (plain / "comparisons.md").read_text()


def test_a_top_k_the_runs_declare_is_reported_without_the_option_and_one_too_large_is_named(tmp_path, capsys):
    """top_k in the runs' config (FedSRC's presets: 5 and 10) is the report's default --top-k; it never separates
    groups (the old runs without it sit beside the new ones); a declared k above a completed run's evaluations is
    left out, and named with the run, where an explicit --top-k is an error; --top-k replaces the declared ones."""
    root = tmp_path / "multirun"
    for k, ((algo, seed), acc) in enumerate(ACCS.items()):
        if algo != "fedprox":  # fedavg's seed 0 from before the key: no top_k
            _write_run(root / str(k), algo, seed, acc, config={"top_k": [2, 5]} if (algo, seed) != ("fedavg", 0)
                       else None)
    out = tmp_path / "r"
    assert main([str(root), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "1 top-k accuracies left out (pass --top-k to choose k)" in err and "top-5 (the runs' top_k)" in err
    assert "only 4 evaluations" in err
    rows = {r["group"]: r for r in _parse_md(out / "results.md")}
    assert set(rows) == {"algo=fedavg", "algo=mifa"} and "top-5 acc" not in rows["algo=fedavg"]
    _check(rows["algo=fedavg"]["top-2 acc"], [(0.6 + 0.65) / 2, (0.62 + 0.7) / 2, (0.71 + 0.69) / 2])
    assert json.loads((out / "report.json").read_text())["top_k"] == [2]
    assert main([str(root), "--top-k", "3", "--out", str(out)]) == 0 and not capsys.readouterr().err
    assert list(_parse_md(out / "results.md")[0])[4] == "top-3 acc" and "top-2" not in (out / "results.md").read_text()
