"""Device traces on the simulated clock: a hand-computed two-device replay, the restricted reader, the checks on
trace files, client-to-device mapping, over-commitment and its inclusion probabilities, end-to-end runs."""

import json
import math
import os
import pickle

import numpy as np
import pytest

from conftest import call, compose
from fedbench.errors import ConfigError
from fedbench.participation import LayerContext, ParticipationProcess, traces
from fedbench.traces_cli import main as traces_main

# Device 1 is online on [0, 100) and [300, 1000); device 2 on [0, 50) and [200, 1000); both repeat every 1000 s.
BEHAVIOUR = {1: {"active": [0, 300], "inactive": [100, 1000], "finish_time": 1000, "duration": 1000, "model": "a"},
             2: {"active": [0, 200], "inactive": [50, 1000], "finish_time": 1000, "duration": 1000, "model": "b"}}
# 2 local steps of 10 samples, a model of 1,000 bytes: device 1 needs 2 x 10 x 1000 ms = 20 s of compute and
# 2 x 1000 x 8 bits / 16 kbit/s = 1 s of transfer, 21 s in all; device 2 needs 2 x 10 x 3000 ms + 1 s = 61 s.
CAPACITY = {1: {"computation": 1000.0, "communication": 16.0}, 2: {"computation": 3000.0, "communication": 16.0}}


def write(tmp_path, name, records, fmt="json"):
    return str(traces.write_records(records, tmp_path / name, fmt))


def two_devices(tmp_path, rounds=9, extra=(), **dropout):
    overrides = ["participation=fedscale", "participation/selection=all", "participation.dropout.overcommit=1",
                 f"participation.availability.path={write(tmp_path, 'behave.json', BEHAVIOUR)}",
                 f"participation.dropout.path={write(tmp_path, 'capacity.json', CAPACITY)}",
                 "participation.dropout.deadline_s=50", "participation.round_seconds=60"]
    overrides += [f"participation.dropout.{k}={v}" for k, v in dropout.items()] + list(extra)
    cfg = compose("dataset=digits", *overrides).participation
    return ParticipationProcess(cfg, LayerContext(2, 0, rounds, 2, np.full(2, 10), {}, model_bytes=1000,
                                                  batch_size=10))


def test_two_device_trace_by_hand(tmp_path):
    """Round by round (deadline 50 s, an empty round lasts 60 s):
    t=0    both online; 1 done at 21; 2 needs 61 > 50 and goes offline at 50: fails -> the round ends at 50
    t=50   2 went offline at 50; 1 (50 s left) done at 21                      -> 71
    t=71   1 (29 s left) done at 21                                             -> 92
    t=92   1 has 8 s left, goes offline mid-round                               -> 100
    t=100  nobody online (1 back at 300, 2 at 200): an empty round              -> 160, then 220
    t=220  2 online, misses the deadline                                        -> 270
    t=270  2 again (1 is back at 300 only)                                      -> 320
    t=320  both: 1 done at 21, 2 misses the deadline                            -> 370
    """
    proc = two_devices(tmp_path)
    want = [  # (available, completed, clock after the round, P(complete | selected))
        ([1, 1], [1, 0], 50, [1, 0]), ([1, 0], [1], 71, [1, 0]), ([1, 0], [1], 92, [1, 0]),
        ([1, 0], [0], 100, [0, 0]), ([0, 0], [], 160, [0, 0]), ([0, 0], [], 220, [0, 0]),
        ([0, 1], [0], 270, [0, 0]), ([0, 1], [0], 320, [0, 0]), ([1, 1], [1, 0], 370, [1, 0])]
    for t, (available, completed, clock, p) in enumerate(want):
        rp = proc.round(t)
        assert rp.available.tolist() == [bool(a) for a in available], t
        assert rp.selected.tolist() == list(np.flatnonzero(available)), t
        assert rp.completed.tolist() == [bool(c) for c in completed], t
        assert proc.clock.now == pytest.approx(clock), t
        assert rp.expected_count.tolist() == pytest.approx(np.asarray(available) * p), t
        assert rp.expected_exact
    assert proc.trace_arrays()["sim_time_s"].tolist() == pytest.approx([w[2] for w in want])
    assert proc.round_stats()["sim_time_s"] == pytest.approx(370)


def test_partial_stragglers_return_the_steps_done_by_the_deadline(tmp_path):
    """Device 2 takes 30 s a step: by the 50 s deadline it has done floor((50 - 1) / 30) = 1 step, and it is still
    online at 50 in round 0 (its interval ends at 50), so it returns 1 step; device 1 is unaffected."""
    proc = two_devices(tmp_path, stragglers="partial")
    rp = proc.round(0)
    assert rp.completed.tolist() == [True, True] and rp.local_steps.tolist() == [2, 1]
    assert proc.clock.now == pytest.approx(50)
    assert rp.expected_count.tolist() == [1.0, 1.0]
    proc = two_devices(tmp_path, stragglers="partial", min_steps=2)  # 1 step is too little: a drop
    assert proc.round(0).completed.tolist() == [True, False]


def test_no_deadline_waits_for_the_slowest(tmp_path):
    proc = two_devices(tmp_path, deadline_s="null")
    rp = proc.round(0)  # device 2 would need 61 s but goes offline at 50: the round ends when it does
    assert rp.completed.tolist() == [True, False] and proc.clock.now == pytest.approx(50)


def test_the_trace_repeats_and_an_interval_at_the_period_end_continues_into_the_next(tmp_path):
    proc = two_devices(tmp_path)
    proc.clock.now = 2320.0  # two periods on: tau = 320, both online until 1000, then on into [0, 100) / [0, 50)
    assert proc.availability.mask(0, None).tolist() == [True, True]
    assert proc.availability.online_for().tolist() == pytest.approx([680 + 100, 680 + 50])
    proc.clock.now = 2150.0  # tau = 150: device 1 offline (back at 300), device 2 too (back at 200)
    assert proc.availability.online_for().tolist() == [0, 0]
    proc = two_devices(tmp_path, extra=["participation.availability.start_s=250"])  # 250 s into the trace
    assert proc.availability.online_for().tolist() == pytest.approx([0, 750 + 50])


# ---- the reader ------------------------------------------------------------------------------------------------
class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_and_never_run(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "client_behave_trace"
    path.write_bytes(pickle.dumps({1: Exploit(marker)}))
    with pytest.raises(traces.TraceError, match=r"refused: it refers to (posix|os)\.system"):
        traces.read_records(path)
    assert not marker.exists()
    cfg = compose("dataset=digits", "participation=fedscale", f"participation.availability.path={path}").participation
    with pytest.raises(ConfigError, match="participation.availability.path"):
        ParticipationProcess(cfg, LayerContext(2, 0, 5, 2, np.full(2, 10), {}))
    assert not marker.exists()


@pytest.mark.parametrize("fmt", ["pickle", "json", "parquet"])
def test_the_three_formats_read_the_same_trace(tmp_path, fmt):
    beh = traces.behaviour(traces.read_records(write(tmp_path, "b", BEHAVIOUR, fmt)))
    assert beh.ids == [1, 2] and beh.starts.tolist() == [0, 300, 0, 200] and beh.ends.tolist() == [100, 1000, 50, 1000]
    assert beh.online_fraction().tolist() == pytest.approx([0.8, 0.85])
    cap = traces.capacity(traces.read_records(write(tmp_path, "c", CAPACITY, fmt)))
    assert cap.computation.tolist() == [1000, 3000] and cap.communication.tolist() == [16, 16]


def test_fedscale_pickles_of_plain_values_are_read(tmp_path):
    path = tmp_path / "client_device_capacity"
    path.write_bytes(pickle.dumps(CAPACITY, protocol=2))
    assert traces.read_records(path) == CAPACITY


@pytest.mark.parametrize("device, change, message", [
    (2, {"active": [-5, 200]}, r"device 2 has active=-5"),
    (1, {"active": [300, 0], "inactive": [1000, 100]}, r"device 1 has active\[1\]=0 before inactive\[0\]=1000"),
    (1, {"active": [0, 50], "inactive": [100, 1000]}, r"device 1 has active\[1\]=50 before inactive\[0\]=100"),
    (2, {"inactive": [50]}, r"device 2 has 2 'active' and 1 'inactive'"),
    (1, {"finish_time": None}, r"device 1 has no key 'finish_time'"),
    (1, {"inactive": [100, 1200]}, r"device 1 has inactive=1200 after finish_time=1000"),
    (1, {"active": [0, 300], "inactive": [0, 1000]}, r"device 1 has inactive\[0\]=0 <= active\[0\]=0"),
    (2, {"finish_time": float("inf")}, r"device 2 has finish_time=inf"),
])
def test_bad_behaviour_traces_are_refused_naming_the_device_and_key(tmp_path, device, change, message):
    records = json.loads(json.dumps(BEHAVIOUR))  # a copy
    records = {int(k): v for k, v in records.items()}
    for k, v in change.items():
        if v is None:
            del records[device][k]
        else:
            records[device][k] = v
    path = tmp_path / "bad.pkl"
    path.write_bytes(pickle.dumps(records))
    with pytest.raises(traces.TraceError, match=message):
        traces.behaviour(traces.read_records(path), str(path))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0, -3.0, "fast"])
def test_bad_capacities_are_refused_naming_the_device_and_key(tmp_path, value):
    path = tmp_path / "cap.pkl"
    path.write_bytes(pickle.dumps({**CAPACITY, 7: {"computation": 10.0, "communication": value}}))
    with pytest.raises(traces.TraceError, match=r"device 7 has communication="):
        traces.capacity(traces.read_records(path), str(path))


def test_unreadable_files_are_refused(tmp_path):
    for name, content in (("junk", b"\x00\x01binary"), ("empty.json", b"{}"), ("list.json", b"[1, 2]"),
                          ("torn.pkl", pickle.dumps(BEHAVIOUR)[:20])):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(traces.TraceError, match=name):
            traces.read_records(tmp_path / name)


# ---- mapping, capacity lookup, configuration errors ------------------------------------------------------------
def process(tmp_path, n, *overrides, devices=BEHAVIOUR, capacity=CAPACITY):
    cfg = compose("dataset=digits", "participation=fedscale", "participation/selection=all",
                  "participation.dropout.overcommit=1",
                  f"participation.availability.path={write(tmp_path, 'b.json', devices)}",
                  f"participation.dropout.path={write(tmp_path, 'c.json', capacity)}", *overrides).participation
    return ParticipationProcess(cfg, LayerContext(n, 0, 5, 2, np.full(n, 10), {}, model_bytes=1000, batch_size=10))


def test_fewer_devices_than_clients_is_an_error_unless_reused(tmp_path):
    with pytest.raises(ConfigError, match=r"participation.availability.path.*2 devices for 5 clients.*reuse=true"):
        process(tmp_path, 5)
    proc = process(tmp_path, 5, "participation.availability.reuse=true")
    assert proc.availability.device.tolist() == [0, 1, 0, 1, 0]
    proc = process(tmp_path, 5, "participation.availability.reuse=true", "participation.availability.mapping=random")
    assert sorted(proc.availability.device[:2].tolist()) == [0, 1] and sorted(proc.availability.device[2:4]) == [0, 1]


def test_random_mapping_is_a_permutation_from_the_seed(tmp_path):
    many = {k: BEHAVIOUR[1 + k % 2] for k in range(1, 21)}
    a = process(tmp_path, 20, "participation.availability.mapping=random", devices=many,
                capacity={k: CAPACITY[1] for k in many}).availability.device
    assert sorted(a.tolist()) == list(range(20)) and a.tolist() != list(range(20))


def test_a_behaviour_device_without_capacity_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"participation.dropout.path.*device 2 of the behaviour trace has no capacity"):
        process(tmp_path, 2, capacity={1: CAPACITY[1]})


@pytest.mark.parametrize("overrides, key", [
    (["participation.dropout.overcommit=1.3"], "participation.dropout.overcommit"),  # selection=all has no S
    (["participation.dropout.stragglers=partial", "participation.dropout.deadline_s=null"],
     "participation.dropout.stragglers"),
    (["participation.dropout.overcommit=0.5"], "participation.dropout.overcommit"),
    (["participation.dropout.deadline_s=0"], "participation.dropout.deadline_s"),
])
def test_configuration_errors_name_the_key(tmp_path, overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        process(tmp_path, 2, *overrides)


# ---- over-commitment -----------------------------------------------------------------------------------------
def fedscale(n=60, s=6, seed=0, *overrides):
    cfg = compose("dataset=digits", "participation=fedscale", f"participation.selection.clients_per_round={s}",
                  *overrides).participation
    return ParticipationProcess(cfg, LayerContext(n, seed, 50, 5, np.full(n, 20), {}, model_bytes=200_000,
                                                  batch_size=16))


def test_overcommitment_selects_ceil_1_3_s_and_keeps_the_first_s_to_finish():
    proc = fedscale()
    assert proc.selection.s == 8 and proc.dropout.keep == 6  # ceil(1.3 x 6)
    kept_rounds = 0
    for t in range(30):
        start = proc.clock.now
        rp = proc.round(t)
        end, proc.clock.now = proc.clock.now, start  # look at the round from its start
        need = (5 * proc.dropout.step_s + proc.dropout.transfer_s)[rp.selected]
        finishes = need <= proc.availability.online_for()[rp.selected]
        proc.clock.now = end
        fastest = np.sort(need[finishes])[:6]
        assert rp.completed.tolist() == (finishes & (need <= fastest.max(initial=-1))).tolist(), t
        if rp.completed.sum() == 6:  # the 6th completion ends the round
            kept_rounds += 1
            assert end - start == pytest.approx(fastest[-1])
    assert kept_rounds > 10


def test_overcommitment_inclusion_probabilities_are_unbiased():
    """At a fixed clock, E[completed count of i] over selection draws equals the expected count the process
    reports (uniform selection: the hypergeometric form is exact). 5 standard errors."""
    proc = fedscale(n=40, s=5)
    for t in range(3):
        proc.round(t)
    available = proc.availability.mask(3, None)
    p, exact = proc.dropout.completion(3, available, proc.selection)
    want = proc.selection.expected(available[None])[0] * p
    assert exact and available.sum() > proc.selection.s
    m = 4000
    counts = np.zeros(40)
    for k in range(m):
        selected = np.asarray(proc.selection.select(3, available, np.random.default_rng(k)), dtype=np.int64)
        done, _ = proc.dropout.apply(3, selected, 5, None)
        np.add.at(counts, selected[done], 1)
    freq = counts / m
    se = np.sqrt(np.maximum(want * (1 - want), 1e-4) / m)
    assert np.all(np.abs(freq - want) < 5 * se + 1e-12), (freq, want)
    assert want.sum() == pytest.approx(5, abs=1e-9) or want.sum() < 5  # S kept when enough finish


def test_every_algorithm_of_a_sweep_sees_the_same_replayed_trace():
    a, b = fedscale(seed=3), fedscale(seed=3)
    for t in range(15):
        ra, rb = a.round(t), b.round(t)
        assert np.array_equal(ra.selected, rb.selected) and np.array_equal(ra.completed, rb.completed)
    assert a.clock.now == b.clock.now > 0


# ---- end to end ----------------------------------------------------------------------------------------------
def test_run_with_synthetic_files_logs_simulated_time_and_the_report_reads_it(tmp_path):
    assert traces_main(["synth", "--devices", "12", "--days", "1", "--out", str(tmp_path / "tr")]) == 0
    args = ["dataset=digits", "partition.num_clients=12", "model=logreg", "rounds=6", "eval_every=2", "logger=csv",
            "participation=fedscale", "participation.selection.clients_per_round=3", "targets=[0.1]",
            f"participation.availability.path={tmp_path / 'tr' / 'client_behave_trace'}",
            f"participation.dropout.path={tmp_path / 'tr' / 'client_device_capacity'}"]
    code, out, job = call(args, tmp_path)
    assert code == 0, out
    import csv

    rows = list(csv.DictReader(open(job / "metrics.csv")))
    times = [float(r["sim_time_s"]) for r in rows]
    assert len(times) == 3 and all(b > a > 0 for a, b in zip(times, times[1:]))
    summary = json.load(open(job / "summary.json"))
    assert summary["sim_time_s"] == pytest.approx(times[-1])
    assert npz_times(job) == pytest.approx(times[-1])
    assert (job / "participation_clock.png").is_file()
    from fedbench.report import report

    report([job], out=tmp_path / "report")
    assert "sim hours to 0.1" in (tmp_path / "report" / "results.md").read_text()
    assert (tmp_path / "report" / "curves_sim_hours.png").is_file()


def npz_times(job):
    return float(np.load(job / "participation.npz")["sim_time_s"][-1])


def test_runs_off_the_clock_have_no_simulated_time(tmp_path):
    code, out, job = call(["dataset=digits", "partition.num_clients=6", "model=logreg", "rounds=2", "eval_every=1",
                           "logger=csv", "participation.selection.clients_per_round=2"], tmp_path)
    assert code == 0, out
    assert "sim_time_s" not in open(job / "metrics.csv").readline()
    assert json.load(open(job / "summary.json"))["sim_time_s"] is None
    assert "sim_time_s" not in np.load(job / "participation.npz")
    assert not (job / "participation_clock.png").exists()


def test_synth_cli_statistics(tmp_path, capsys):
    assert traces_main(["synth", "--devices", "400", "--format", "parquet", "--out", str(tmp_path)]) == 0
    beh = traces.behaviour(traces.read_records(tmp_path / "client_behave_trace.parquet"))
    frac = beh.online_fraction()
    assert 0.1 < frac.mean() < 0.35 and beh.finish.tolist() == [7 * 86400.0] * 400
    cap = traces.capacity(traces.read_records(tmp_path / "client_device_capacity.parquet"))
    spread = np.quantile(cap.computation, 0.99) / np.quantile(cap.computation, 0.01)
    assert 30 < spread < 300 and math.isfinite(spread)
    assert traces_main(["check", str(tmp_path / "client_behave_trace.parquet")]) == 0
    assert "400 devices" in capsys.readouterr().out
