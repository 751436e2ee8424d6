"""Paired statistics (``fedbench.stats``) against hand-computed cases and scipy, and the report's comparisons on a
synthetic sweep (paired by seed, one differing key, verdicts only where the CI excludes 0)."""

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from fedbench import stats
from fedbench.report import report

from conftest import write_fake_run, write_fake_sweep


def test_paired_difference_hand_computed():
    # d = (1, 3): bootstrap means are 1, 2, 2, 3 with equal probability -> the 95% percentile CI is [1, 3]
    p = stats.paired([1.0, 3.0], [0.0, 0.0], ("A", "B"))
    # the bootstrap interval of two seeds is [min d, max d], which excludes 0; the t-interval 2 +- 12.706 * 1 does
    # not, so no verdict at n = 2
    assert (p.n, p.mean, p.low, p.high, p.p_improvement) == (2, 2.0, 1.0, 3.0, 1.0)
    assert p.verdict == "not distinguishable at n=2"
    assert stats.t_interval(np.array([1.0, 3.0])) == pytest.approx((2 - 12.7062047, 2 + 12.7062047))
    # d = (.02, .03, .04, .03, .025): mean .029, sem sqrt(55e-6 / 5) = .0033166, t_4 = 2.7764451: .029 -+ .0092084
    five = stats.paired([0.52, 0.53, 0.54, 0.53, 0.525], [0.5] * 5, ("A", "B"))
    d = np.array([0.02, 0.03, 0.04, 0.03, 0.025])
    assert stats.t_interval(d) == pytest.approx((0.0197916, 0.0382084), rel=1e-5)
    assert five.verdict == "A better"
    q = stats.paired([0.5, 0.7, 0.6], [0.6, 0.6, 0.6], ("A", "B"))  # d = (-.1, .1, 0): P(A > B) = (0 + 1 + .5) / 3
    assert q.p_improvement == pytest.approx(0.5) and q.verdict == "not distinguishable at n=3"
    assert stats.paired([0.1, 0.2, 0.15], [0.5, 0.9, 0.6], ("A", "B")).verdict == "B better"
    assert stats.paired([0.7], [0.6]).verdict == "one seed: no interval" and math.isnan(stats.paired([0.7], [0.6]).low)
    assert stats.paired([], []).n == 0
    assert stats.bootstrap_ci([0.2, 0.2, 0.2]) == pytest.approx((0.2, 0.2))  # nothing to resample


def test_paired_ci_equals_scipys_bootstrap_on_random_data():
    rng = np.random.default_rng(3)
    for n in (3, 5, 10):
        a, b = rng.normal(0.7, 0.05, n), rng.normal(0.68, 0.05, n)
        p = stats.paired(a, b, seed=11)
        ref = sps.bootstrap((a - b,), np.mean, confidence_level=0.95, n_resamples=stats.RESAMPLES,
                            method="percentile", vectorized=False, rng=np.random.default_rng(11))
        assert (p.low, p.high) == (ref.confidence_interval.low, ref.confidence_interval.high)
        assert p.mean == pytest.approx(float(np.mean(a - b)))


def test_iqm_and_profile():
    iqm, low, high, n = stats.iqm([0.0, 0.5, 0.6, 0.7, 0.8, 10.0, 0.55, 0.65])
    assert n == 8 and iqm == pytest.approx(np.mean([0.55, 0.6, 0.65, 0.7]))  # the middle half of the sorted eight
    assert low <= iqm <= high
    np.testing.assert_allclose(stats.profile([0.2, 0.6, 0.9], np.array([0.0, 0.5, 0.95])), [1.0, 2 / 3, 0.0])


def test_report_writes_paired_comparisons(tmp_path):
    root = tmp_path / "sweep"
    # B beats A by 0.02-0.04 on every seed (paired); C is A plus noise larger than its mean difference
    finals = {"a": [0.60, 0.70, 0.65, 0.62], "b": [0.63, 0.72, 0.69, 0.64], "c": [0.68, 0.61, 0.66, 0.63]}
    write_fake_sweep(root, {algo: [[0.1, 0.2, acc - 0.1, acc] for acc in accs] for algo, accs in finals.items()})
    out = report([root]).folder
    text = (out / "comparisons.md").read_text()
    rows = {(r.split("|")[1].strip(), r.split("|")[2].strip(), r.split("|")[3].strip()): r for r in
            text.splitlines() if r.startswith("| algo")}
    ab = rows[("algo=a", "algo=b", "final test acc")]
    assert "algo=b better" in ab and "| 4 |" in ab
    assert "not distinguishable at n=4" in rows[("algo=a", "algo=c", "final test acc")]
    assert (out / "profile.png").is_file() and "Paired comparisons" in (out / "index.html").read_text()
    assert "IQM" in text


def test_the_global_training_loss_is_tabulated_compared_lower_is_better_and_drawn(tmp_path):
    """Runs with engine.eval_train: the final global training loss gets a column, a paired comparison whose verdict
    names the lower loss, and a fourth curve panel; runs without it get none of these."""
    from PIL import Image

    root = tmp_path / "sweep"
    # b's final global loss is 0.05-0.07 below a's on every seed (the accuracies tie); nan rows are skipped
    losses = {"a": [0.90, 0.80, 0.85, 0.95], "b": [0.84, 0.74, 0.79, 0.88]}
    write_fake_sweep(root, {algo: [{"acc": [0.1, 0.2, 0.5, 0.6 + seed / 100],
                                    "global_loss": [2.0, 1.5, loss, math.nan if seed == 0 else loss]}
                                   for seed, loss in enumerate(finals)] for algo, finals in losses.items()})
    out = report([root]).folder
    rows = {r.split("|")[1].strip(): r for r in (out / "results.md").read_text().splitlines()[2:]}
    assert "| final global train loss |" in (out / "results.md").read_text()
    assert "| 0.875 ± 0.065 |" in rows["algo=a"] and "| 0.8125 ± 0.061 |" in rows["algo=b"]
    text = (out / "comparisons.md").read_text()
    loss = next(r for r in text.splitlines() if "| final global train loss |" in r)
    assert "algo=b better" in loss and "| 1.00 |" in loss  # A's loss is the higher on every seed
    compared = json.loads((out / "report.json").read_text())["comparisons"]
    diff = next(c for c in compared if c["score"] == "final global train loss")
    assert diff["mean_diff"] == pytest.approx(0.0625) and 0 < diff["ci_low"] <= diff["ci_high"]
    assert "lower is better" in text
    acc = next(r for r in text.splitlines() if "| final test acc |" in r)
    assert "not distinguishable at n=4" in acc  # the same accuracies: the loss alone separates them
    with_panel = Image.open(out / "curves_round.png").size[0]

    plain = tmp_path / "plain"
    for seed in range(2):
        write_fake_run(plain / str(seed), "a", seed, [0.1, 0.2, 0.5, 0.6])
    out = report([plain]).folder
    assert "global" not in (out / "results.md").read_text() + (out / "comparisons.md").read_text()
    assert Image.open(out / "curves_round.png").size[0] == pytest.approx(with_panel * 3 / 4, rel=0.02)


def test_paired_costs_censor_a_missed_target_at_the_budget_hand_computed():
    nan = math.nan
    # seeds: both reached (d = -50, -60); A missed it within 500 after B reached it at 300 (d >= 200, at its bound);
    # neither reached it (undecided); A stopped at 80 before B reached it at 100 (sign unknown: undecided)
    c = stats.paired_costs([100, 200, nan, nan, nan], [500, 500, 500, 500, 80],
                           [150, 260, 300, nan, 100], [500, 500, 500, 500, 500], ("A", "B"))
    assert (c.paired.n, c.censored, c.undecided) == (3, (1, 0), 2)
    assert c.paired.mean == pytest.approx((-50 - 60 + 200) / 3)
    assert c.paired.p_improvement == pytest.approx(1 / 3)  # A cost more on one seed of three
    assert c.paired.verdict == "not distinguishable at n=3"
    assert c.row()["censored_a"] == 1 and c.row()["undecided"] == 2
    # A is cheaper by 90-110 on four seeds; on the fifth it missed the target within 125, B reached it at 120: the
    # bound (+5) leaves A's lead a verdict, but the seed's true difference may be any size, so it is withheld
    lead = [100, 100, 100, 100]
    held = stats.paired_costs(lead + [nan], [300] * 4 + [125], [200, 210, 190, 205, 120], [300] * 5, ("A", "B"))
    assert stats.paired(lead + [125], [200, 210, 190, 205, 120], ("B", "A")).verdict == "A better"
    assert held.paired.verdict == "not decided: 1 censored seed(s) favour B"
    # a censored seed on the side of the verdict (B missed it within 300, A reached it at 100) leaves it standing
    kept = stats.paired_costs(lead + [100], [300] * 5, [200, 210, 190, 205, nan], [300] * 5, ("A", "B"))
    assert kept.censored == (0, 1) and kept.paired.mean == pytest.approx((-100 - 110 - 90 - 105 - 200) / 5)
    assert kept.paired.verdict == "A cheaper"
    assert stats.paired_costs([nan], [10], [nan], [10]).paired.verdict == "no shared seeds"


def test_the_kaplan_meier_median_cost_counts_the_runs_that_missed_the_target_hand_computed():
    nan = math.nan
    # reached at 10 and 20, missed within budgets 25 and 100: S(10) = 3/4, S(20) = 3/4 * (1 - 1/3) = 1/2 -> 20,
    # where the mean over the two runs that reached it says 15
    assert stats.km_median([10, 20, nan, nan], [10, 20, 25, 100]) == (20, True)
    # censored at 15, between the events: S(10) = 3/4, S(20) = 3/4 * (1 - 1/2) = 3/8 -> 20
    assert stats.km_median([10, 20, nan, 30], [10, 20, 15, 30]) == (20, True)
    # one run of three reached it: S stays 2/3, so the median lies beyond the largest budget, 150
    assert stats.km_median([30, nan, nan], [30, 150, 120]) == (150, False)
    assert stats.km_median([nan, nan], [80, 90]) == (90, False)
    # every run reached it: the lower median (S(50) = 1/2)
    assert stats.km_median([70, 30, 90, 50], [70, 30, 90, 50]) == (50, True)
    assert stats.km_median([40, 10, 20], [40, 10, 20]) == (20, True)
    median, exact = stats.km_median([], [])
    assert math.isnan(median) and not exact
    # in any order, censored runs leaving the risk set: at risk 6, 4, 3 at the events 7, 12, 18 (9 censored before
    # 12), so S(12) = 5/6 * 3/4 = 5/8 and S(18) = 5/8 * 2/3 = 5/12 -> 18
    assert stats.km_median([12, nan, 7, 30, nan, 18], [12, 9, 7, 30, 40, 18]) == (18, True)


def test_report_compares_costs_to_a_target_with_censored_seeds(tmp_path):
    root = tmp_path / "sweep"
    # to 0.7 (evaluations at rounds 10-40): fast reaches it at round 20 on every seed; slow at 30, 40 and never (its
    # seed 2 is censored at its budget, round 40, after fast reached it); to 0.5 both at round 10 (a tie)
    accs = {"fast": [[0.5, 0.7, 0.75, 0.8]] * 3, "slow": [[0.5, 0.6, 0.7, 0.72], [0.5, 0.6, 0.65, 0.7],
                                                     [0.5, 0.6, 0.65, 0.66]]}
    write_fake_sweep(root, accs)
    out = report([root]).folder
    text = (out / "comparisons.md").read_text()
    assert "## Cost to a target" in text and "censored at its budget" in text
    rows = {r.split("|")[3].strip(): [c.strip() for c in r.split("|")[1:-1]] for r in text.splitlines()
            if r.startswith("| algo=fast") and " to 0." in r}
    assert rows["rounds to 0.7"][3:6] == ["3", "0 / 1", "0"]  # seeds, censored A / B, undecided
    # (20 - 30 + 20 - 40 + 20 - 40) / 3, slow's seed 2 at its bound; its interval: the bootstrap's
    assert rows["rounds to 0.7"][6] == "−16.7 [−20, −10]" and rows["rounds to 0.7"][8] == "algo=fast cheaper"
    assert rows["gradient evaluations to 0.7"][6].startswith("−2,670 [")  # 160 gradients a round
    assert rows["rounds to 0.5"][6] == "+0 [+0, +0]" and "not distinguishable" in rows["rounds to 0.5"][8]
    costs = json.loads((out / "report.json").read_text())["cost_comparisons"]
    seven = next(c for c in costs if c["score"] == "rounds to 0.7")
    assert seven["mean_diff"] == pytest.approx(-50 / 3) and seven["censored_b"] == 1 and seven["seeds"] == [0, 1, 2]
    assert "Cost to a target" in (out / "index.html").read_text()
