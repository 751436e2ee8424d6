"""scripts/reproduce.py: every paper's smallest comparison runs end to end through fedbench-tune at tiny scale and
writes the report's files (slow); every section of every paper composes at small and full scale (its plan is what
fedbench-tune checks before any job)."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, script

reproduce = script("reproduce")


def _run_tiny(paper, section, out):
    """``scripts/reproduce.py PAPER --scale tiny --section SECTION --out OUT``, which must succeed."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce.py"), paper, "--scale", "tiny",
                           "--section", section, "--out", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _plan(cmd):
    """fedbench-tune's own plan of a reproduce command (every method composed and checked, spaces resolved)."""
    from fedbench.config import register_configs
    from fedbench.tune import cli

    register_configs()
    args = cli.parser().parse_intermixed_args(cmd[3:])
    key, values = cli.methods(args)
    task, hydra_args = cli._split(args.overrides, key)
    return cli.make_plan(args, key, values, task, hydra_args)


def _selection(plan, path):
    """A selection.json of ``plan`` whose choice for every method is the first point of its space."""
    chosen = {m: {d["key"]: d["values"][0] for d in plan.spaces[m]} for m in plan.methods}
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({
        "budget": plan.trials, "tune_seeds": plan.tune_seeds, "select": plan.select, "sampler": plan.sampler,
        "val_fraction": plan.val_fraction, "overrides": plan.overrides, "compared": plan.key,
        "methods": {m: {"space": plan.spaces[m], "chosen": {"params": p, "overrides": [f"{k}={v!r}" for k, v in
                                                                                     p.items()]}}
                    for m, p in chosen.items()}}))


@pytest.mark.parametrize("scale", ["small", pytest.param("full", marks=pytest.mark.slow)])
def test_every_section_composes_with_a_space_for_every_method(tmp_path, scale):
    plans = {}
    for paper, sections in reproduce.PAPERS.items():
        for section in sections:
            cmd, directory = section.command(scale, tmp_path, [])
            assert directory == tmp_path / paper / scale / section.name
            if section.after:  # it runs the choices of an earlier section: one as fedbench-tune would record it
                assert cmd[cmd.index("--from") + 1] == str(section.selection(scale, tmp_path))
                _selection(plans[paper, section.after], section.selection(scale, tmp_path))
            plan = plans[paper, section.name] = _plan(cmd)
            assert plan.methods == section.methods and plan.trials == section.trials
            assert all(plan.spaces[m] for m in plan.methods), (paper, section.name)
            assert set(plan.seeds).isdisjoint(plan.tune_seeds)
            if not section.after:
                assert list(plan.tune_seeds) == [int(s) for s in section.tune_seeds.split(",")]


def test_a_launcher_override_replaces_the_sections_and_bad_arguments_are_refused(capsys):
    cmd, _ = reproduce.PAPERS["mimic"][0].command("small", ROOT, ["hydra/launcher=basic"])
    assert [c for c in cmd if c.startswith("hydra/launcher=")] == ["hydra/launcher=basic"]
    assert "hydra.launcher.n_jobs=2" not in cmd and "engine.num_threads=1" not in cmd
    # joblib given explicitly (another worker count) keeps the section's one thread per worker, so its plan is the
    # section's and a rerun continues the section's directory
    section = reproduce.PAPERS["fedamd"][0]
    default, _ = section.command("small", ROOT, [])
    given, _ = section.command("small", ROOT, ["hydra/launcher=joblib", "hydra.launcher.n_jobs=1"])
    plan = lambda cmd: cmd[:cmd.index("--dir") + 2]  # noqa: E731 (the arguments before the launcher's)
    assert "engine.num_threads=1" in default and plan(given) == plan(default)
    assert reproduce.main(["mimic", "--section", "nope", "--dry-run"]) == 2
    assert "Allowed: roundrobin, roundrobin_tau10" in capsys.readouterr().err
    # a second section name after the first is not a Hydra override (it would reach fedbench-tune as one)
    assert reproduce.main(["mimic", "--section", "roundrobin", "static", "--dry-run"]) == 2
    assert "'static' is neither an option nor a Hydra override" in capsys.readouterr().err
    assert reproduce.main(["mimic", "--section", "roundrobin", "~logger", "rounds=2", "--dry-run"]) == 0
    with pytest.raises(SystemExit):
        reproduce.main(["nope"])


def test_a_section_that_carries_another_ones_choices_waits_for_its_selection(tmp_path, capsys):
    assert reproduce.main(["wang22", "--section", "periodic_20k", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "runs the choices of section 'periodic'" in err and "Fix: run --section periodic first" in err
    assert not (tmp_path / "wang22" / "small" / "periodic_20k").exists()
    # the documented choices without their trials: the record docs/reproductions.md links for that section
    record = reproduce.documented(reproduce.DOC.read_text())["wang22", "small", "periodic"]
    shown = re.search(r"copy its record (\S+) to (\S+)\.$", err.strip())
    assert shown and shown.groups() == (str(reproduce.DOC.parent / "tuned" / record),
                                        str(tmp_path / "wang22" / "small" / "periodic" / "selection.json"))
    assert reproduce.main(["wang22", "--scale", "tiny", "--section", "periodic_20k", "--out", str(tmp_path)]) == 2
    assert "copy its record" not in capsys.readouterr().err  # no tiny-scale record in the document


@pytest.mark.slow
@pytest.mark.parametrize("paper", sorted(reproduce.PAPERS))
def test_each_papers_smallest_comparison_runs_through_fedbench_tune(tmp_path, paper):
    section = reproduce.PAPERS[paper][0]
    _run_tiny(paper, section.name, tmp_path)
    root = tmp_path / paper / "tiny" / section.name
    selection = json.loads((root / "selection.json").read_text())
    methods = section.methods[:2]
    assert sorted(selection["methods"]) == sorted(methods)
    assert {m: selection["methods"][m]["trials_run"] for m in methods} == {m: 2 for m in methods}
    finals = sorted(p.parent for p in (root / "final").rglob("summary.json"))
    assert len(finals) == 4 and all(json.loads((p / "summary.json").read_text())["status"] == "completed"
                                    for p in finals)
    report = root / "report"
    for name in ("index.html", "results.md", "comparisons.md", "curves_round.png"):
        assert (report / name).is_file() and (report / name).stat().st_size > 0, name
    assert all(m in (report / "comparisons.md").read_text() for m in methods)
    for later in [s for s in reproduce.PAPERS[paper] if s.after == section.name]:  # carries this tuning's choices
        _run_tiny(paper, later.name, tmp_path)
        carried = json.loads((tmp_path / paper / "tiny" / later.name / "selection.json").read_text())
        assert carried["methods"] == selection["methods"] and not (tmp_path / paper / "tiny" / later.name /
                                                                   "trials").exists()
        assert (tmp_path / paper / "tiny" / later.name / "report" / "results.md").is_file()


def test_a_joint_section_is_tuned_like_its_partner_and_waits_for_its_finals(tmp_path, capsys):
    sections = reproduce.PAPERS["fedamd"]
    partner, joint = (next(s for s in sections if s.name == n) for n in ("a20_2seeds", "a20_2seeds_baselines"))
    cmd, report, partner_final = joint.joint_command("small", tmp_path)
    assert cmd[3:5] == [str(tmp_path / "fedamd" / "small" / n / "final") for n in (partner.name, joint.name)]
    assert report == tmp_path / "fedamd" / "small" / joint.name / "report_joint"
    assert cmd[cmd.index("--tuned") + 1:cmd.index("--out")] == ["algo.server_lr", "client.lr"]
    assert partner_final == [tmp_path / "fedamd" / "small" / partner.name / "final"]
    assert reproduce._joint_report("fedamd", joint, cmd, report, partner_final) == 2
    assert "Fix: run --section a20_2seeds" in capsys.readouterr().err and not report.exists()
    for change, message in (({"trials": 9}, "trials differ"),
                            ({"methods": partner.methods}, "fedamd, fedavg also run by a20_2seeds_baselines"),
                            ({"joint": "a20_500"}, "is not an earlier section")):
        bad = reproduce.Section(**{**joint.__dict__, **change})
        with pytest.raises(ValueError, match=message):
            reproduce.check_joint([partner, bad, *sections])
    # two sections that carry the choices of joint sections are joint too; carrying another's choices is not alike
    carried = next(s for s in sections if s.joint and s.after)
    assert next(s for s in sections if s.name == carried.after).joint == next(
        s for s in sections if s.name == carried.joint).after
    bad = reproduce.Section(**{**carried.__dict__, "after": "a20"})
    with pytest.raises(ValueError, match="after differ"):
        reproduce.check_joint([*sections, bad])
    # so are two that carry the choices of sections two links apart in one joint group (GradMA's Dirichlet 0.01
    # parts on five final seeds: the others' and the ablation's three-seed sections are linked through the claims')
    gradma = reproduce.PAPERS["gradma"]
    far = next(s for s in gradma if s.name == "dir0.01_fullgrid_3seeds_others_5finals")
    ablation = next(s for s in gradma if s.name == far.joint_also[0])
    assert next(s for s in gradma if s.name == far.after).partners[0] != ablation.after
    reproduce.check_joint(gradma)
    for after in ("dir0.1_fullgrid_3seeds", "dir0.01_fullgrid"):  # another group; a section joint with none
        bad = reproduce.Section(**{**far.__dict__, "after": after})
        with pytest.raises(ValueError, match="after differ"):
            reproduce.check_joint([*gradma, bad])


def test_a_joint_report_takes_the_finals_of_every_section_it_names(tmp_path, capsys):
    sections = reproduce.PAPERS["gradma"]
    joint = next(s for s in sections if s.name == "dir0.01_fullgrid_3seeds_others")
    names = [joint.joint, *joint.joint_also]
    cmd, report, partners = joint.joint_command("small", tmp_path)
    assert partners == [tmp_path / "gradma" / "small" / n / "final" for n in names]
    assert cmd[3:7] == [*map(str, partners), str(tmp_path / "gradma" / "small" / joint.name / "final")]
    # one partner's finals missing: no report, the fix names that section
    for path in partners[:2]:
        path.mkdir(parents=True)
    assert reproduce._joint_report("gradma", joint, cmd, report, partners) == 2
    assert f"Fix: run --section {names[2]}" in capsys.readouterr().err and not report.exists()
    # every partner is tuned alike, and no method is in two of the report's sections
    ablation = next(s for s in sections if s.name == names[1])
    for change, message in (({"joint_also": [*joint.joint_also, "dir0.1_fullgrid_3seeds"]}, "not an earlier section"),
                            ({"joint_also": ["dir0.01_fullgrid"]}, "tune_seeds differ"),
                            ({"methods": ["moon", "gradma_s"]}, f"gradma_s also run by {joint.name}"),
                            ({"joint": ""}, "joint_also needs joint"),
                            ({"ablation": ["client.lr=0.1"]}, "an ablation has one partner")):
        bad = reproduce.Section(**{**joint.__dict__, **change})
        with pytest.raises(ValueError, match=message):
            reproduce.check_joint([bad if s is joint else s for s in sections])
    twice = reproduce.Section(**{**ablation.__dict__, "name": "twice", "joint": "", "joint_also": []})
    bad = reproduce.Section(**{**joint.__dict__, "joint_also": [*joint.joint_also, "twice"]})
    with pytest.raises(ValueError, match=f"gradma_s, gradma_w also run by {names[1]}"):
        reproduce.check_joint([*sections, twice, bad])


def test_a_section_reuses_the_runs_of_the_sections_it_names_where_they_exist(tmp_path):
    sections = reproduce.PAPERS["fedamd"]
    section = next(s for s in sections if s.name == "a20_500_3seeds")
    assert section.reuse == ["a20_500_2seeds"]
    cmd, _ = section.command("small", tmp_path, [])
    assert "--reuse-runs" not in cmd  # nothing to copy yet: every job runs
    earlier = tmp_path / "fedamd" / "small" / "a20_500_2seeds"
    earlier.mkdir(parents=True)
    (earlier / "tune.json").write_text("{}")
    cmd, _ = section.command("small", tmp_path, [])
    assert cmd[cmd.index("--reuse-runs") + 1] == str(earlier)
    bad = reproduce.Section(**{**section.__dict__, "reuse": ["a20_500_4seeds"]})
    with pytest.raises(ValueError, match="reuse='a20_500_4seeds' is not an earlier section of fedamd"):
        reproduce.check_reuse([*sections, bad])


def test_an_ablation_reruns_its_partners_methods_under_its_setting_and_reports_them_apart(tmp_path):
    sections = reproduce.PAPERS["fedamd"]
    ablation = next(s for s in sections if s.ablation)
    partner = next(s for s in sections if s.name == ablation.joint)
    ours, theirs = (s.command("small", tmp_path, [])[0] for s in (ablation, partner))
    ours, theirs = ours[3:ours.index("--algos")], theirs[3:theirs.index("--algos")]
    assert sorted(ours) == sorted([*theirs, *ablation.ablation])  # the partner's overrides and the setting changed
    report, _, _ = ablation.joint_command("small", tmp_path)
    assert report[report.index("--group-by") + 1:report.index("--tuned")] == ["algo.name", "algo.p"]
    assert reproduce.ablated_key("+algo_settings.fedamd.p=0.9") == "algo.p"
    assert reproduce.ablated_key("participation.selection.clients_per_round=50") == \
        "participation.selection.clients_per_round"
    for change, message in (({"methods": ["fedamd", "fedadam"]}, "not in the partner: fedadam"),
                            ({"ablation": []}, "fedamd also run by a100_p0.9"), ({"space": []}, "space differ")):
        bad = reproduce.Section(**{**ablation.__dict__, **change})
        with pytest.raises(ValueError, match=message):
            reproduce.check_joint([partner, bad])
    reproduce.check_joint([partner, ablation])


@pytest.mark.slow
def test_an_ablations_report_tells_its_runs_from_its_partners(tmp_path):
    ablation = next(s for s in reproduce.PAPERS["fedamd"] if s.ablation)
    for name in (ablation.joint, ablation.name):
        _run_tiny("fedamd", name, tmp_path)
    report = json.loads((tmp_path / "fedamd" / "tiny" / ablation.name / "report_joint" / "report.json").read_text())
    labels = sorted(g["group"].split(" [")[0] for g in report["groups"])
    assert labels == ["algo=fedamd, algo.p=0.9", "algo=fedamd, algo.p=auto", "algo=fedavg, algo.p=None"], labels


@pytest.mark.slow
def test_a_joint_sections_report_compares_its_methods_with_its_partners(tmp_path):
    joint = next(s for s in reproduce.PAPERS["fedamd"] if s.joint and not s.ablation)
    for name in (joint.joint, joint.name):
        _run_tiny("fedamd", name, tmp_path)
    report = json.loads((tmp_path / "fedamd" / "tiny" / joint.name / "report_joint" / "report.json").read_text())
    partner = next(s for s in reproduce.PAPERS["fedamd"] if s.name == joint.joint)
    methods = partner.methods[:2] + joint.methods[:2]
    assert sorted(g["group"].split(" ")[0] for g in report["groups"]) == sorted(f"algo={m}" for m in methods)
    compared = {frozenset((c["a"], c["b"])) for c in report["comparisons"]}
    assert len(compared) == len(methods) * (len(methods) - 1) // 2


def test_a_joint_report_is_written_even_after_an_earlier_section_failed(tmp_path, monkeypatch):
    calls = []

    def run(cmd):  # the tuning of the first section fails, every other command succeeds
        calls.append(cmd[2])
        return 1 if len(calls) == 1 else 0

    monkeypatch.setattr(reproduce, "run_command", run)
    (tmp_path / "fedamd" / "small" / "a20_2seeds" / "final").mkdir(parents=True)
    status = reproduce.main(["fedamd", "--section", "a20", "--section", "a20_2seeds_baselines", "--out", str(tmp_path)])
    assert status == 1 and calls == ["fedbench.tune.cli", "fedbench.tune.cli", "fedbench.report"]


#: a job that, asked to stop, finishes its round and writes its checkpoint (half a second) before it exits
STOPPING_JOB = r"""
import os, signal, sys, time
from pathlib import Path
out, got = Path(sys.argv[1]), []
signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
(out / "pgid").write_text(str(os.getpgid(0)))
(out / "ready").write_text("")
deadline = time.time() + 60
while not got and time.time() < deadline:
    time.sleep(0.01)
time.sleep(0.5)
(out / "checkpoint").write_text(str(len(got)))
sys.exit(3)
"""


def test_a_stopped_command_gets_the_signal_once_and_is_waited_for(tmp_path):
    def stop_this_script():
        while not (tmp_path / "ready").exists():
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    threading.Thread(target=stop_this_script, daemon=True).start()
    with pytest.raises(reproduce.Interrupted) as stopped:
        reproduce.run_command([sys.executable, "-c", STOPPING_JOB, str(tmp_path)])
    assert stopped.value.name == "SIGTERM"
    assert (tmp_path / "checkpoint").read_text() == "1"  # written before run_command returned; one signal, not two
    assert int((tmp_path / "pgid").read_text()) != os.getpgid(0)  # its own group: a group signal is not doubled
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_stopped_section_ends_the_command_and_says_how_to_continue(tmp_path, monkeypatch, capsys):
    calls = []

    def run(cmd):
        calls.append(cmd[2])
        raise reproduce.Interrupted(signal.SIGTERM)

    monkeypatch.setattr(reproduce, "run_command", run)
    (tmp_path / "fedamd" / "small" / "a100" / "final").mkdir(parents=True)
    status = reproduce.main(["fedamd", "--section", "a100_p0.9", "--section", "a20_2seeds", "--out", str(tmp_path)])
    assert status == 128 + signal.SIGTERM and calls == ["fedbench.tune.cli"]  # no later section, no joint report
    err = capsys.readouterr().err
    assert "stopped by SIGTERM" in err and "Rerun the same command" in err


@pytest.mark.slow
def test_a_section_stopped_like_timeout_does_leaves_its_jobs_checkpoints(tmp_path):
    """GNU timeout signals its whole process group and returns when the script has ended: every job that was
    running must have written its checkpoint by then (a job that had not, restarts from round 0 on the rerun)."""
    log = tmp_path / "log"
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "reproduce.py"), "mimic", "--scale", "tiny",
                                 "--section", "roundrobin", "--out", str(tmp_path), "rounds=400",
                                 "hydra/launcher=packed"],
                                cwd=ROOT, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT)
    trial = tmp_path / "mimic" / "tiny" / "roundrobin" / "trials" / "fedavg" / "t00_seed100"
    deadline = time.time() + 300
    while not (trial / "rounds.csv").is_file() or len((trial / "rounds.csv").read_text().splitlines()) < 3:
        assert time.time() < deadline and proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=300)
    # at once: the script has returned, so the job's checkpoint must be there already
    summary = json.loads((trial / "summary.json").read_text())
    assert summary["status"] == "interrupted" and any((trial / "checkpoints").iterdir()), log.read_text()[-3000:]
    assert proc.returncode == 128 + signal.SIGTERM
    assert "Rerun the same command" in log.read_text()


def test_a_finished_section_says_how_its_selection_agrees_with_the_documented_record(tmp_path, monkeypatch, capsys):
    record = json.loads((ROOT / "docs" / "tuned" / "mimic_fmnist_static_2seeds_small_selection.json").read_text())
    directory = tmp_path / "mimic" / "small" / "static_2seeds"
    directory.mkdir(parents=True)

    def run(changed):  # the rerun writes the record's selection, with one tuning run's score changed or not
        def command(cmd):
            here = json.loads(json.dumps(record))
            if changed:
                here["methods"]["mifa"]["trials"][1]["runs"]["101"]["score"][0] = 0.5
            (directory / "selection.json").write_text(json.dumps(here))
            return 0
        return command

    monkeypatch.setattr(reproduce, "run_command", run(False))
    assert reproduce.main(["mimic", "--section", "static_2seeds", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "agrees with the record: all 70 tuning runs end alike with identical scores, and the 5 choices" in out
    monkeypatch.setattr(reproduce, "run_command", run(True))
    assert reproduce.main(["mimic", "--section", "static_2seeds", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "differs from the record in 1 place (70 tuning runs compared" in out
    assert "mifa trial 1 (client.lr=0.3), tuning seed 101: score 0.5 here" in out
    assert "docs/tuned/mimic_fmnist_static_2seeds_small_selection.json" in out
    # a scale the document records nothing at says nothing about a record
    assert reproduce.main(["mimic", "--scale", "tiny", "--section", "static_2seeds", "--out", str(tmp_path)]) == 0
    assert "the record" not in capsys.readouterr().out
