"""docs/reproductions.md keeps the protocol it states (issue 26, "Must hold").

Every result section (a section that links a selection record under ``docs/tuned/``) rests on at least 3 final
seeds, disjoint from the tuning seeds, with the same trial budget for every method and a choice for each; it is the
output of the ``make reproduce`` section it shows, at the scale it names (``small`` unless ``SCALE=`` says otherwise),
with the same preset, overrides, methods, trials and seeds as scripts/reproduce.py declares (a copied run names the
same job of a section it reuses, by a path relative to its own directory); and it states the hardware, its wall
times, the trial count, each method's chosen values and paired verdicts with their CIs. The summary table and the
README link every result section by its heading's anchor, and the README counts the sections it lists.
"""

import json
import re
import shlex
import unicodedata

import pytest

from conftest import ROOT, script

reproduce = script("reproduce")
DOC = reproduce.DOC


def slug(heading):
    """The anchor Python-Markdown's ``toc`` extension (MkDocs) gives a heading."""
    value = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


SECTIONS = reproduce.sections(DOC.read_text())
RESULTS = [(h, b, reproduce.RECORD.search(b)) for h, b in SECTIONS]
RESULTS = [(h, b, m.group(1)) for h, b, m in RESULTS if m]


def without_dir(args):
    """A command's arguments as a set, less ``--dir PATH`` (the shown command may leave it to ``make``), each
    ``--reuse-runs PATH`` (passed where that directory exists: copies of the same jobs, never other numbers) and
    the launcher's worker count (how many jobs share the machine changes wall times, never a number)."""
    args = list(args)
    for flag in ("--dir", *["--reuse-runs"] * args.count("--reuse-runs")):
        if flag in args:
            del args[args.index(flag):args.index(flag) + 2]
    return sorted(a.replace(f"{ROOT}/", "") for a in args if not a.startswith("hydra.launcher.n_jobs="))


def test_the_document_has_its_result_sections():
    assert len(RESULTS) >= 10, [h for h, _, _ in RESULTS]
    assert len({f for _, _, f in RESULTS}) == len(RESULTS), "two sections link the same selection record"
    # so a rerun of each section finds its record (reproduce.py's check_record): one section per command
    assert sorted(reproduce.documented(DOC.read_text()).values()) == sorted(f for _, _, f in RESULTS)


@pytest.mark.parametrize("heading, body, record", RESULTS, ids=[slug(h) for h, _, _ in RESULTS])
def test_each_result_section_rests_on_its_protocol(heading, body, record):
    selection = json.loads((ROOT / "docs" / "tuned" / record).read_text())
    seeds, tune_seeds, budget = selection["seeds"], selection["tune_seeds"], selection["budget"]
    assert len(seeds) >= 3, f"{heading}: {len(seeds)} final seeds"
    assert not set(seeds) & set(tune_seeds), f"{heading}: final seeds {seeds} were tuned on"
    assert budget >= 2, f"{heading}: {budget} trial(s) is a shared step size, not a tuned one"
    for method, entry in selection["methods"].items():
        assert entry["budget"] == budget and entry["trials_run"] == budget, (heading, method)
        assert len(entry["trials"]) == budget and entry["chosen"]["params"], (heading, method)
        # the values chosen from a space are stated in the section (its table names each method's choice)
        searched = {s["key"] for s in entry["space"] if len(s["values"]) > 1}
        for key in searched:
            written = f"{entry['chosen']['params'][key]:g}"
            forms = {written, re.sub(r"e([+-])0(\d)", r"e\1\2", written)}  # 1e-05 is written 1e-5
            assert any(re.search(rf"(?<![\d.]){re.escape(f)}(?!\d)", body) for f in forms), (heading, method, key)

    assert re.search(r"\bCPU\b|\bGPU\b", body), f"{heading}: no hardware stated"
    assert re.search(r"\d[\d,.]* s\b|\d[\d,.]* min\b", body), f"{heading}: no wall time stated"
    assert re.search(rf"\b{budget}\s+trials\b", body), f"{heading}: the trial count {budget} is not stated"
    ci = r"[+−-]\d\.\d+ \[[+−-]\d\.\d+, [+−-]\d\.\d+\]"
    assert re.search(ci, body), f"{heading}: no paired difference with its CI"


@pytest.mark.parametrize("heading, body, record", RESULTS, ids=[slug(h) for h, _, _ in RESULTS])
def test_each_result_section_is_the_output_of_the_command_it_shows(heading, body, record):
    call = reproduce.called(body)
    assert call, f"{heading}: no make reproduce command"
    paper, scale, name = call
    section = next(s for s in reproduce.PAPERS[paper] if s.name == name)
    selection = json.loads((ROOT / "docs" / "tuned" / record).read_text())
    joined = re.sub(r"\\\n\s*", "", body)
    cmd, _ = section.command(scale, ROOT / "outputs" / "reproduce", [])
    assert cmd[3:cmd.index("--algos" if section.key == "algo" else "--compare")] == selection["overrides"], heading
    assert list(selection["methods"]) == section.methods
    shown = re.search(r"^fedbench-tune (.+?)\n```", joined, re.M | re.S)
    assert shown, f"{heading}: the fedbench-tune command is not shown"
    assert without_dir(shlex.split(shown.group(1))) == without_dir(cmd[3:]), heading
    if section.joint:  # its numbers come from the report of its finals with its partner's
        report, _, _ = section.joint_command(scale, ROOT / "outputs" / "reproduce")
        shown = re.search(r"^fedbench-report (.+)$", joined, re.M)
        assert shown, f"{heading}: the joint fedbench-report command is not shown"
        assert without_dir(shlex.split(shown.group(1))) == without_dir(report[3:]), heading
    assert selection["budget"] == section.trials
    assert ",".join(map(str, selection["seeds"])) == section.seeds[scale]
    # a copy (--reuse-runs) names its source as the same job of a section this one reuses, relative to its directory
    for job, source in selection.get("copied_runs", {}).items():
        assert source in {f"../{name}/{job}" for name in section.reuse}, (heading, job, source)
    if not section.after:  # a carried selection keeps the tuning seeds of the section it came from
        assert ",".join(map(str, selection["tune_seeds"])) == section.tune_seeds, heading
    for item in section.space:
        key, values = item.split("=", 1)
        for method, entry in selection["methods"].items():
            space = {s["key"]: s["values"] for s in entry["space"]}
            assert space[key] == [float(v) for v in values.split(",")], (heading, method, key)


def test_the_summary_and_the_readme_link_every_result_section():
    anchors = {slug(h) for h, _ in SECTIONS}
    results = {slug(h) for h, _, _ in RESULTS}
    summary = set(re.findall(r"\]\(#([\w.-]+)\)", DOC.read_text()))
    readme = set(re.findall(r"docs/reproductions\.md#([\w.-]+)\)", (ROOT / "README.md").read_text()))
    assert summary <= anchors and readme <= anchors, (summary - anchors, readme - anchors)
    assert results <= summary, results - summary
    assert results <= readme, results - readme


def test_the_readme_counts_the_sections_it_lists():
    readme = (ROOT / "README.md").read_text()
    stated = re.search(r"<summary>all (\d+) sections</summary>(.*?)</details>", readme, re.S)
    assert stated, "README: no <summary>all N sections</summary> list"
    rows = re.findall(r"^\| \[.*?\]\(docs/reproductions\.md#", stated.group(2), re.M)
    assert int(stated.group(1)) == len(rows), f"README says all {stated.group(1)} sections and lists {len(rows)}"
