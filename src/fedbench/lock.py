"""One owner per run directory: ``RunLock`` is taken before a run writes anything, by fresh runs and resumes alike.

Two mechanisms, because run directories live on local disks and on shared file systems:

* an OS advisory lock (``flock``, exclusive, non-blocking) on ``<run dir>/.lock``. The kernel releases it when the
  process dies, however it dies (SIGKILL, OOM), so a dead run never leaves a stale lock. On Linux NFS clients
  ``flock`` is carried out as a POSIX lock by the server (NFSv4 leases; NFSv3 needs ``lockd``), so it holds across
  machines;
* a record in the same file: host, pid, start time and a heartbeat rewritten in place every ``heartbeat_s`` by a
  daemon thread. It names the owner in the error a second process gets, and it is the lock where the OS lock is
  missing or only node-local (``flock`` refused with ENOLCK / EOPNOTSUPP, Lustre mounted with ``localflock``, some
  FUSE file systems): a record left by another process counts as its owner while the owner is alive on this host,
  or, on another host, while its heartbeat still advances (the taker watches it for ``1.5 x heartbeat_s``) and is
  younger than ``stale_s``.

The file is never deleted (deleting a lock file races with a process about to lock it); a released lock leaves an
empty record. Readers (``owner``) take a shared lock for an instant, which never blocks the run itself.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional

from fedbench.errors import FedbenchError
from fedbench.storage import guard

LOCK_NAME = ".lock"
RECORD_BYTES = 512  # the record is padded to a fixed size and rewritten in place (no truncation, no new blocks)
HEARTBEAT_S = 10.0
STALE_S = 120.0
NO_OS_LOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
HOST = socket.gethostname()


class RunLocked(FedbenchError):
    """``run_dir`` is owned by another live process (``owner``: its record, possibly empty)."""

    def __init__(self, run_dir: Path, owner: Dict[str, Any]):
        self.run_dir, self.owner = run_dir, owner
        who = describe(owner)
        super().__init__(f"{run_dir} is in use by another fedbench process ({who}); a run directory has one owner at "
                         "a time. Fix: wait for that run to end (or stop it), then resume; if it is gone and the "
                         f"directory is on a file system without working locks, delete {run_dir / LOCK_NAME} once "
                         f"its heartbeat is older than {STALE_S:g} s.")


def describe(owner: Dict[str, Any]) -> str:
    if not owner.get("pid"):
        return "owner unknown"
    age = time.time() - float(owner.get("heartbeat", 0))
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(owner.get("started", 0))))
    return f"pid {owner['pid']} on host {owner.get('host', '?')}, started {started}, last heartbeat {max(age, 0):.0f} s ago"


def _read(path: Path) -> Dict[str, Any]:
    """The record in a lock file; {} when there is none (released, being written, or not a record)."""
    for _ in range(3):  # a record being rewritten in place may be read half-written: read again
        try:
            text = path.read_bytes().decode("utf-8", "replace").strip()
        except OSError:
            return {}
        try:
            record = json.loads(text) if text else {}
            return record if isinstance(record, dict) else {}
        except ValueError:
            time.sleep(0.01)
    return {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def owner(run_dir: Path) -> Optional[Dict[str, Any]]:
    """The record of the process that owns ``run_dir`` now, or None when nobody holds its OS lock (or there is no
    lock file). Read-only: never creates the file, never waits."""
    path = Path(run_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read(path)
    except OSError:  # no OS locks here: trust a live record
        record = _read(path)
        return record if record and _claims(record, wait=0.0) else None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _claims(record: Dict[str, Any], wait: float, path: Optional[Path] = None) -> bool:
    """Whether the owner named by ``record`` (another process) is alive: on this host, its pid runs; elsewhere,
    its heartbeat is younger than ``STALE_S`` and, given ``wait`` > 0, advances within ``wait`` seconds."""
    pid = record.get("pid")
    if not pid or (record.get("host") == HOST and int(pid) == os.getpid()):
        return False
    if record.get("host") == HOST:
        return _alive(int(pid))
    beat = float(record.get("heartbeat", 0))
    if time.time() - beat > STALE_S:
        return False
    if wait <= 0 or path is None:
        return True
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(min(1.0, wait / 10))
        if float(_read(path).get("heartbeat", 0)) != beat:
            return True
    return False


class RunLock:
    """``with RunLock(run_dir):`` or ``acquire()`` / ``release()``. ``acquire`` raises ``RunLocked`` naming the
    owner when another live process holds the directory."""

    def __init__(self, run_dir: Path, heartbeat_s: float = HEARTBEAT_S):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.heartbeat_s = heartbeat_s
        self.fd: Optional[int] = None
        self.os_lock = False
        self.started = time.time()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def acquire(self, wait_s: float = 0.0) -> "RunLock":
        """Take the lock, trying again for up to ``wait_s`` seconds while another process holds it."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return self._acquire()
            except RunLocked:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))

    def _acquire(self) -> "RunLock":
        with guard(self.path, "create the lock file"):
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self.os_lock = self._os_lock(fd)
            record = _read(self.path)
            if _claims(record, 1.5 * self.heartbeat_s, self.path):  # node-local or missing OS locks
                raise RunLocked(self.run_dir, record)
            self.fd = fd
            self._write()
            if not self.os_lock:  # two takers without OS locks: the later record wins, the other backs off
                time.sleep(0.05)
                if _read(self.path).get("token") != self._token:
                    self.fd = None
                    raise RunLocked(self.run_dir, _read(self.path))
        except BaseException:
            os.close(fd)
            self.fd = None
            raise
        self._thread = threading.Thread(target=self._beat, name=f"fedbench-lock-{self.run_dir.name}", daemon=True)
        self._thread.start()
        return self

    def _os_lock(self, fd: int) -> bool:
        """Take the exclusive OS lock (retrying for half a second: a reader holds its shared lock for an instant);
        False where the file system has none."""
        for attempt in range(10):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if attempt == 9:
                    raise RunLocked(self.run_dir, _read(self.path)) from None
                time.sleep(0.05)
            except OSError as exc:
                if exc.errno in NO_OS_LOCK:
                    return False
                raise
        return False

    @property
    def _token(self) -> str:
        return f"{HOST}:{os.getpid()}:{self.started!r}"

    def _record(self, released: bool = False) -> bytes:
        record = {} if released else {"host": HOST, "pid": os.getpid(), "started": self.started,
                                      "heartbeat": time.time(), "token": self._token,
                                      "os_lock": self.os_lock}
        return json.dumps(record).encode().ljust(RECORD_BYTES)

    def _write(self, released: bool = False) -> None:
        if self.fd is not None:
            os.pwrite(self.fd, self._record(released), 0)

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                self._write()
            except OSError:  # a full disk must not kill the run through its lock; the OS lock still holds
                pass

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.fd is None:
            return
        try:
            self._write(released=True)
        except OSError:
            pass
        finally:
            os.close(self.fd)  # closing the descriptor releases the OS lock
            self.fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
