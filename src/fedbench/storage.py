"""Writing a run's files: every write into a run directory goes through here, so that a storage fault (no space,
a read-only file system, a quota, an I/O error) becomes one ``StorageFault`` that names the file, the cause and
the fix, and that ``fedbench.cli.run_job`` turns into ``status: failed`` with ``error.log``, never a traceback.

Whole files (``summary.json``, ``config.yaml``, checkpoints, pictures, arrays) are written to a temporary file
beside the target (named by the writing process) and renamed into place, so a failed write leaves the previous
version intact, and the temporary file is removed (giving back the space it took). Appended files
(``metrics.csv``, ``rounds.csv``, a memmap table's undo log) are written under ``guard``; a torn last line is
dropped by the run that resumes them (``fedbench.logging.run_logger``). Every file is opened for writing here
(``write_file``, ``open_for_writing``), so a test can put a fault at any write.

A run holds a small ``Reserve`` (``.reserve``, 64 KiB of allocated blocks) that it gives back on a storage fault,
so that the failure record (``summary.json``, ``error.log``) still fits on a disk the run has just filled.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import IO, BinaryIO, Callable, Iterator, Union

RESERVE_BYTES = 1 << 16

#: What to do about a fault, by errno (the message always names the file and the operating system's words).
FIXES = {
    errno.ENOSPC: "free space on that file system (or write elsewhere: hydra.run.dir / hydra.sweep.dir)",
    errno.EDQUOT: "free space within your quota on that file system, or raise the quota",
    errno.EROFS: "the file system is mounted read-only: remount it writable, or write elsewhere "
                 "(hydra.run.dir / hydra.sweep.dir)",
    errno.EACCES: "make the run directory writable for this user, or write elsewhere",
    errno.EPERM: "make the run directory writable for this user, or write elsewhere",
    errno.EIO: "the device reported an I/O error: check the disk (or the network file system) before resuming",
}


class StorageFault(Exception):
    """An ``OSError`` while writing ``path`` (the original is ``error``, and the ``__cause__``)."""

    def __init__(self, path: Union[str, Path], action: str, error: OSError):
        self.path, self.action, self.error = Path(path), action, error
        code = errno.errorcode.get(error.errno or 0, "")
        cause = error.strerror or str(error) or type(error).__name__
        self.fix = FIXES.get(error.errno or 0, "check that the run directory's file system is writable")
        super().__init__(f"cannot {action} {path}: {cause}" + (f" ({code})" if code else ""))


@contextlib.contextmanager
def guard(path: Union[str, Path], action: str = "write") -> Iterator[None]:
    """Turn an ``OSError`` raised inside the block into a ``StorageFault`` naming ``path``."""
    try:
        yield
    except OSError as exc:
        raise StorageFault(path, action, exc) from exc


def write_file(path: Union[str, Path], fill: Callable[[BinaryIO], object], sync: bool = False) -> Path:
    """Write ``path`` atomically: ``fill(f)`` writes a temporary file beside it, which is flushed (and, with
    ``sync``, forced to the device) and renamed into place. On any failure the temporary file is removed and the
    previous ``path`` is untouched."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with guard(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                fill(f)
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def open_for_writing(path: Union[str, Path], mode: str = "a", text: bool = True) -> IO:
    """``path`` opened for writing (``mode`` "w" or "a"; text files as UTF-8 with the csv module's newlines);
    its writes belong under ``guard(path)``."""
    with guard(path, "open"):
        if text:
            return open(path, mode, newline="", encoding="utf-8")
        return open(path, mode + "b")


class Reserve:
    """``RESERVE_BYTES`` of allocated space in ``<folder>/.reserve``, held while a run writes and freed (first
    thing) when a storage fault stops it, so that the failure record fits. A run that cannot reserve them does not
    start (``hold`` raises ``StorageFault``): it would fill the disk before its first checkpoint anyway."""

    def __init__(self, folder: Union[str, Path]):
        self.path = Path(folder) / ".reserve"

    def hold(self) -> None:
        try:
            with guard(self.path, f"reserve {RESERVE_BYTES // 1024} KiB for the run's failure record in"):
                with open(self.path, "wb") as f:
                    os.posix_fallocate(f.fileno(), 0, RESERVE_BYTES)
        except StorageFault:
            self.free()
            raise

    def free(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)


def write_bytes(path: Union[str, Path], data: bytes, sync: bool = False) -> Path:
    return write_file(path, lambda f: f.write(data), sync)


def write_text(path: Union[str, Path], text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))
