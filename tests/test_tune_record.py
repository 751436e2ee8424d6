"""fedbench.tune.record: how a rerun's selection.json agrees with a recorded one, on hand-built selections."""

import copy

from fedbench.tune.record import agreement, differences


def trial(index, lr, *runs):
    """A trial at client.lr = lr with one run per tuning seed 100, 101, ...: a score, or None for a divergence."""
    return {"index": index, "params": {"client.lr": lr},
            "runs": {str(100 + i): {"status": "diverged" if s is None else "completed", "score": [s, 0.0]}
                     for i, s in enumerate(runs)}}


def selection():
    return {"methods": {
        "fedavg": {"trials": [trial(0, 0.1, 0.7, 0.72), trial(1, 1.0, None, None)],
                   "chosen": {"params": {"client.lr": 0.1}}},
        "mifa": {"trials": [trial(0, 0.1, 0.75, 0.71), trial(1, 0.03, 0.74, 0.73)],
                 "chosen": {"params": {"client.lr": 0.1}}},
    }}


def test_an_identical_rerun_agrees_and_counts_every_tuning_run():
    assert differences(selection(), selection()) == ([], 8, 0.0)
    assert agreement(selection(), selection()) == ("agrees with the record: all 8 tuning runs end alike with "
                                                   "identical scores, and the 2 choices are the same")


def test_each_kind_of_difference_is_named_and_the_largest_score_difference_given():
    here, record = selection(), selection()
    here["methods"]["mifa"]["trials"][0]["runs"]["101"]["score"][0] = 0.68  # 0.03 below the record
    here["methods"]["mifa"]["trials"][1]["runs"]["100"]["score"][0] = 0.7405  # 0.0005 above
    here["methods"]["fedavg"]["trials"][1] = trial(1, 1.0, 0.3, None)  # seed 100 trained here, diverged there
    here["methods"]["mifa"]["chosen"]["params"] = {"client.lr": 0.03}
    found, count, largest = differences(here, record)
    assert found == [
        "fedavg trial 1 (client.lr=1), tuning seed 100: completed here, diverged in the record",
        "mifa trial 0 (client.lr=0.1), tuning seed 101: score 0.68 here, 0.71 in the record",
        "mifa trial 1 (client.lr=0.03), tuning seed 100: score 0.7405 here, 0.74 in the record",
        "mifa: chose client.lr=0.03 here, client.lr=0.1 in the record",
    ]
    assert count == 8 and abs(largest - 0.03) < 1e-12
    text = agreement(here, record, shown=2)
    assert text.splitlines()[0] == ("differs from the record in 4 places (8 tuning runs compared; largest score "
                                    "difference 0.03):")
    assert text.splitlines()[1:] == ["  " + found[0], "  " + found[1], "  ... and 2 more"]


def test_what_one_side_lacks_is_named():
    here, record = selection(), selection()
    here["methods"]["moon"] = copy.deepcopy(here["methods"].pop("mifa"))  # another method instead of MIFA
    here["methods"]["fedavg"]["trials"] = [trial(0, 0.3, 0.7, 0.72)]  # another value; trial 1 not run
    here["methods"]["fedavg"]["chosen"] = None  # a partial rerun has no choice yet
    found, count, _ = differences(here, record)
    assert found == [
        "moon: not in the record",
        "fedavg trial 0: client.lr=0.3 here, client.lr=0.1 in the record",
        "fedavg trial 1 (client.lr=1): not run here",
        "fedavg: chose nothing here, client.lr=0.1 in the record",
        "mifa: in the record, not in this run",
    ]
    assert count == 0
    here["methods"]["fedavg"]["trials"] = [trial(0, 0.1, 0.7)]  # the same trial, on one of its two seeds
    assert "fedavg trial 0 (client.lr=0.1), tuning seed 101: not run here" in differences(here, record)[0]
