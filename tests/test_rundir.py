"""A run directory survives its neighbours and its disk: one owner at a time (``fedbench.lock``), and storage faults
at every write site end in a readable state (``fedbench.storage``) from which a resume continues exactly."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import BASE, R, ROOT, call, compose, csv_rows, run_resumable

from fedbench import lock, storage
from fedbench.lock import RunLock, RunLocked, owner
from fedbench.runs import STOPPED, run_state

CLI = [*BASE, "checkpoint_every=2"]


def _spawn(args, cwd):
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


# -- the lock ------------------------------------------------------------------------------------------------------

def test_a_second_owner_is_refused_with_the_owners_pid_and_host(tmp_path):
    with RunLock(tmp_path / "run"):
        assert owner(tmp_path / "run")["pid"] == os.getpid()
        with pytest.raises(RunLocked) as err:
            RunLock(tmp_path / "run").acquire()
        assert f"pid {os.getpid()} on host {lock.HOST}" in str(err.value) and str(tmp_path / "run") in str(err.value)
    assert owner(tmp_path / "run") is None  # released: the file stays, with an empty record
    RunLock(tmp_path / "run").acquire().release()


def test_a_requeued_job_waits_for_its_previous_attempt(tmp_path):
    held = RunLock(tmp_path / "run").acquire()
    threading.Timer(1.5, held.release).start()  # the previous attempt finishes its checkpoint and exits
    with pytest.raises(RunLocked):
        RunLock(tmp_path / "run").acquire()
    RunLock(tmp_path / "run").acquire(wait_s=10).release()


def test_a_killed_owner_leaves_no_stale_lock(tmp_path):
    code = (f"import sys, time; sys.path.insert(0, {str(ROOT / 'src')!r}); from fedbench.lock import RunLock; "
            f"RunLock({str(tmp_path / 'run')!r}).acquire(); print('held', flush=True); time.sleep(60)")
    proc = _spawn(["-c", code], tmp_path)
    assert proc.stdout.readline().strip() == "held"
    with pytest.raises(RunLocked, match=f"pid {proc.pid}"):
        RunLock(tmp_path / "run").acquire()
    proc.kill()
    proc.wait()
    RunLock(tmp_path / "run").acquire().release()  # the OS released it with the process


def _foreign_owner(path, stop, beat=True):
    """Another host's record in ``path``, its heartbeat advancing every 20 ms until ``stop`` (unless ``beat`` is
    False: a record its owner left when it died)."""
    def write():
        record = {"host": "elsewhere", "pid": 4242, "started": time.time(), "heartbeat": time.time()}
        os.pwrite(fd, json.dumps(record).encode().ljust(lock.RECORD_BYTES), 0)

    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    write()
    while beat and not stop.wait(0.02):
        write()
    os.close(fd)


@pytest.mark.parametrize("os_locks", [True, False], ids=["node-local-os-locks", "no-os-locks"])
def test_another_hosts_live_heartbeat_owns_the_directory(tmp_path, monkeypatch, os_locks):
    """Where OS locks are node-local (Lustre ``localflock``) or missing (ENOLCK), the heartbeat decides: a record
    whose heartbeat advances is a live owner; one that does not (its owner died) is taken over."""
    if not os_locks:
        def no_locks(fd, op):
            raise OSError(errno.ENOLCK, "No locks available")
        monkeypatch.setattr(lock.fcntl, "flock", no_locks)
    run = tmp_path / "run"
    run.mkdir()
    stop = threading.Event()
    beating = threading.Thread(target=_foreign_owner, args=(run / ".lock", stop))
    beating.start()
    try:
        time.sleep(0.05)
        with pytest.raises(RunLocked, match="pid 4242 on host elsewhere"):
            RunLock(run, heartbeat_s=0.2).acquire()
    finally:
        stop.set()
        beating.join()
    taken = RunLock(run, heartbeat_s=0.2).acquire()  # the heartbeat stopped: its owner is gone
    assert json.loads((run / ".lock").read_text())["pid"] == os.getpid()
    taken.release()


def test_two_concurrent_resumes_one_runs_the_other_gets_the_lock_error(tmp_path):
    data = f"data.root={tmp_path / 'data'}"
    run_dir = tmp_path / "run"
    run_resumable(compose(*BASE, data), run_dir, tmp_path / "data", stop_at=R)  # interrupted at round R
    _, full = run_resumable(compose(*BASE, data), tmp_path / "full", tmp_path / "data")
    args = [str(ROOT / "run.py"), *BASE, data, f"resume={run_dir}", f"hydra.run.dir={tmp_path / 'unused'}"]
    first = _spawn(args, tmp_path)
    start = time.time()
    while (json.loads((run_dir / ".lock").read_text() or "{}") if (run_dir / ".lock").exists() else {}).get(
            "pid") != first.pid:
        assert first.poll() is None and time.time() - start < 120, first.communicate()
        time.sleep(0.005)
    first.send_signal(signal.SIGSTOP)  # the owner, paused while it holds the directory
    try:
        second = _spawn(args, tmp_path)
        out, err = second.communicate(timeout=120)
    finally:
        first.send_signal(signal.SIGCONT)
    assert second.returncode == 2, out + err
    assert f"pid {first.pid} on host {lock.HOST}" in err and str(run_dir) in err and "Traceback" not in out + err
    assert "resuming" not in out + err  # it never started
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0 and "resuming" in out, out + err
    assert csv_rows(run_dir / "metrics.csv") == csv_rows(tmp_path / "full" / "metrics.csv")
    assert csv_rows(run_dir / "rounds.csv") == csv_rows(tmp_path / "full" / "rounds.csv")
    assert json.loads((run_dir / "summary.json").read_text())["final_test_acc"] == full["final_test_acc"]


def test_resume_true_over_a_sweep_skips_a_job_another_process_owns(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", *BASE, "seed=0,1", f"hydra.sweep.dir={sweep}"]
    assert call(args, tmp_path)[0] in (0, None)
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    (jobs[0] / "summary.json").write_text(json.dumps({"status": "interrupted"}))
    with RunLock(jobs[0]):
        code, out, _ = call([*args, "resume=true"], tmp_path)
    assert code in (0, None), out
    assert f"skipping job {jobs[0].name}" in out and "another process" in out
    table = out[out.index("fedbench: sweep"):]
    assert "running" in table and f"pid {os.getpid()}" in table and "Traceback" not in out
    assert json.loads((jobs[0] / "summary.json").read_text()) == {"status": "interrupted"}  # untouched


def test_a_summary_left_running_by_a_dead_job_reads_as_failed(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps({"status": "running", "reason": None}))
    assert run_state(run_dir) == ("failed", STOPPED)
    with RunLock(run_dir):
        assert run_state(run_dir) == ("running", None)


# -- storage faults ------------------------------------------------------------------------------------------------

def test_a_failed_rewrite_leaves_the_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "summary.json"
    storage.write_bytes(path, b'{"round": 1}')

    def half(f):
        f.write(b'{"rou')
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(storage.StorageFault, match=r"No space left on device \(ENOSPC\)") as err:
        storage.write_file(path, half)
    assert str(path) in str(err.value) and "free space" in err.value.fix
    assert path.read_bytes() == b'{"round": 1}' and os.listdir(tmp_path) == ["summary.json"]


class Faults:
    """``fedbench.storage.open`` with a fault: in the ``nth`` opening for writing of a file whose name contains
    ``site``, the ``write``-th write call fails with ``err`` after half of its bytes, and so does every later write
    to that file (``always``: and to every later opening too). Records every file opened and, at the fault, the
    ``summary.json`` then on disk."""

    def __init__(self, site=None, nth=1, write=1, err=errno.ENOSPC, always=False):
        self.site, self.nth, self.write, self.err, self.always = site, nth, write, err, always
        self.seen, self.count, self.faults, self.summary_at_fault = [], 0, 0, None

    def __call__(self, path, mode="r", *args, **kw):
        f = open(path, mode, *args, **kw)
        name = os.path.basename(str(path))
        if any(c in mode for c in "wa"):
            self.seen.append(name)
            if self.site and self.site in name:
                self.count += 1
                if self.count == self.nth or (self.always and self.count > self.nth):
                    return _Failing(f, self, os.path.join(os.path.dirname(str(path)), "summary.json"))
        return f


class _Failing:
    def __init__(self, f, faults, summary):
        self.f, self.faults, self.summary, self.writes = f, faults, summary, 0

    def write(self, data):
        self.writes += 1
        if self.writes < self.faults.write:
            return self.f.write(data)
        if not self.faults.faults:
            self.faults.summary_at_fault = open(self.summary).read() if os.path.exists(self.summary) else None
        self.faults.faults += 1
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        raise OSError(self.faults.err, os.strerror(self.faults.err))

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


#: (file, opening, write call) of one fault per write site: mid-run where the file is written more than once (the
#: CSVs' header is their first write, round r's row the (r+1)-th of rounds.csv; the second evaluation's summary,
#: the second checkpoint)
SITES = [("config.yaml", 1, 1), ("label_hist.npy", 1, 1), ("partition.png", 1, 1), ("rounds.csv", 1, 6),
         ("metrics.csv", 1, 3), ("summary.json", 2, 1), ("round_", 2, 1), ("participation.npz", 1, 1),
         ("participation.png", 1, 1)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("full")
    code, out, _ = call([*CLI, f"hydra.run.dir={tmp / 'run'}"], tmp)
    assert code in (0, None), out
    return tmp / "run"


def test_every_write_site_is_covered(tmp_path, monkeypatch):
    faults = Faults()
    monkeypatch.setattr(storage, "open", faults, raising=False)
    assert call([*CLI, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)[0] in (0, None)
    assert all(any(site in name for name in faults.seen) for site, _, _ in SITES), faults.seen
    assert {n for n in faults.seen if not any(site in n for site, _, _ in SITES)} == {".reserve"}, faults.seen


CASES = [(*site, errno.ENOSPC) for site in SITES] + [(*site, errno.EIO) for site in SITES
                                                     if site[0] in ("summary.json", "round_", "metrics.csv")]


@pytest.mark.parametrize("site, nth, write, err", CASES, ids=[f"{errno.errorcode[c[3]]}-{c[0]}" for c in CASES])
def test_a_fault_at_any_write_ends_failed_and_resumes_exactly(tmp_path, monkeypatch, uninterrupted, site, nth,
                                                              write, err):
    run_dir = tmp_path / "run"
    faults = Faults(site, nth, write, err)
    monkeypatch.setattr(storage, "open", faults, raising=False)
    code, out, _ = call([*CLI, f"hydra.run.dir={run_dir}"], tmp_path)
    assert code == 1 and faults.faults, out
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("fedbench: error:")]
    assert len(errors) == 1 and os.strerror(err) in errors[0] and "Fix:" in errors[0] and "resume=" in errors[0], out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "storage fault" in summary["reason"] and site in summary["reason"]
    assert "Traceback" in (run_dir / "error.log").read_text()
    if faults.summary_at_fault is not None:
        json.loads(faults.summary_at_fault)  # the summary on disk when the fault hit was whole
    assert not [p for p in run_dir.rglob("*") if p.name.endswith(".tmp") or p.name == ".reserve"]
    monkeypatch.setattr(storage, "open", open, raising=False)  # space is back
    code, out, _ = call([*CLI, f"hydra.run.dir={tmp_path / 'unused'}", f"resume={run_dir}"], tmp_path)
    assert code in (0, None), out
    assert csv_rows(run_dir / "metrics.csv") == csv_rows(uninterrupted / "metrics.csv")
    assert csv_rows(run_dir / "rounds.csv") == csv_rows(uninterrupted / "rounds.csv")
    a, b = (json.loads((d / "summary.json").read_text()) for d in (run_dir, uninterrupted))
    assert a["status"] == "completed" and a["final_test_acc"] == b["final_test_acc"]


def test_when_the_summary_cannot_be_rewritten_the_last_good_one_stays(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    faults = Faults("summary.json", 2, always=True)
    monkeypatch.setattr(storage, "open", faults, raising=False)
    code, out, _ = call([*CLI, f"hydra.run.dir={run_dir}"], tmp_path)
    assert code == 1 and "Traceback" not in out and "its last good version is kept" in out, out
    assert (run_dir / "summary.json").read_text() == faults.summary_at_fault  # round 2's, intact
    assert run_state(run_dir) == ("failed", STOPPED)  # it says running, but nobody runs it
    assert "Traceback" in (run_dir / "error.log").read_text()


def test_a_read_only_run_directory_is_one_paragraph(tmp_path, monkeypatch):
    faults = Faults("metrics.csv", 1, 1, errno.EROFS)
    monkeypatch.setattr(storage, "open", faults, raising=False)
    code, out, _ = call([*CLI, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert code == 1 and "Traceback" not in out and "Read-only file system (EROFS)" in out and "remount" in out, out


def _can_mount_tmpfs(tmp_path):
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {tmp_path}"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.parametrize("free_kib", [pytest.param(100, marks=pytest.mark.slow), 125,
                                      pytest.param(150, marks=pytest.mark.slow)])
def test_a_full_tmpfs_ends_failed_and_resumes_exactly_once_space_is_freed(tmp_path, uninterrupted, free_kib):
    """The real thing: a small tmpfs (in a user and mount namespace) that the run fills at different points."""
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("no tmpfs: unprivileged user namespaces are not available here")
    disk, run_dir = tmp_path / "disk", tmp_path / "disk" / "run"
    disk.mkdir()
    run = f"{sys.executable} {ROOT / 'run.py'} {' '.join(CLI)} data.root={tmp_path / 'data'}"
    script = f"""
        mount -t tmpfs -o size=512k tmpfs {disk} || exit 90
        dd if=/dev/zero of={disk}/ballast bs=1k count=$((512 - {free_kib})) 2>/dev/null
        {run} hydra.run.dir={run_dir} > {tmp_path}/first.out 2>&1; echo $? > {tmp_path}/first.rc
        cp -r {run_dir} {tmp_path}/failed
        rm {disk}/ballast
        {run} hydra.run.dir={disk}/unused resume={run_dir} > {tmp_path}/second.out 2>&1; echo $? > {tmp_path}/second.rc
        cp -r {run_dir} {tmp_path}/resumed
    """
    env = {**os.environ, "WANDB_SILENT": "true"}
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = (tmp_path / "first.out").read_text()
    assert (tmp_path / "first.rc").read_text().strip() == "1", first
    assert "No space left on device" in first and "Traceback" not in first, first
    failed = tmp_path / "failed"
    summary = json.loads((failed / "summary.json").read_text())
    assert summary["status"] == "failed" and "No space left" in summary["reason"]
    assert (failed / "error.log").read_text().strip()
    second = (tmp_path / "second.out").read_text()
    assert (tmp_path / "second.rc").read_text().strip() == "0", second
    resumed = tmp_path / "resumed"
    assert csv_rows(resumed / "metrics.csv") == csv_rows(uninterrupted / "metrics.csv")
    assert csv_rows(resumed / "rounds.csv") == csv_rows(uninterrupted / "rounds.csv")
    assert json.loads((resumed / "summary.json").read_text())["final_test_acc"] == \
        json.loads((uninterrupted / "summary.json").read_text())["final_test_acc"]
