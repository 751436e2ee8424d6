"""Checkpoints: everything a run depends on, written atomically, read back without unpickling code.

A checkpoint is one ``torch.save`` file ``<run dir>/checkpoints/round_<r>.pt`` holding only tensors, numbers,
strings, lists and dicts (numpy arrays are packed as tensors), so it is read with ``torch.load(weights_only=True)``:
loading a checkpoint can never run code. It is written to a temporary file, flushed to disk and renamed into place,
so a kill at any moment leaves either the previous checkpoint or the new one; the newest ``keep`` are kept, and a
storage fault while writing one (``fedbench.storage.StorageFault``) leaves the previous ones as the resume point.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from fedbench.errors import FedbenchError
from fedbench.storage import guard, write_file

_ARRAY = "__ndarray__"
_BYTES = "__bytes__"
FORMAT = 1


def pack(obj: Any) -> Any:
    """``obj`` with numpy arrays, numpy scalars and bytes replaced by tensors / Python numbers (recursively)."""
    if isinstance(obj, np.ndarray):
        return {_ARRAY: torch.from_numpy(np.ascontiguousarray(obj).copy()), "dtype": obj.dtype.str}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, bytes):
        return {_BYTES: torch.frombuffer(bytearray(obj), dtype=torch.uint8) if obj else torch.zeros(0, dtype=torch.uint8)}
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: pack(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [pack(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot checkpoint a value of type {type(obj).__name__}")


def unpack(obj: Any) -> Any:
    """The inverse of ``pack`` (tuples come back as lists)."""
    if isinstance(obj, dict):
        if _ARRAY in obj:
            return obj[_ARRAY].numpy().astype(np.dtype(obj["dtype"]), copy=True)
        if _BYTES in obj:
            return obj[_BYTES].numpy().tobytes()
        return {k: unpack(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unpack(v) for v in obj]
    return obj


class Checkpointer:
    """The checkpoints of one run directory."""

    PATTERN = re.compile(r"^round_(\d+)\.pt$")

    def __init__(self, run_dir: Path, keep: int = 2):
        self.folder = Path(run_dir) / "checkpoints"
        self.keep = max(int(keep), 1)

    def paths(self) -> List[Tuple[int, Path]]:
        """(round, path) of the checkpoints on disk, oldest first."""
        if not self.folder.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.folder.iterdir() if (m := self.PATTERN.match(p.name))]
        return sorted(found)

    def save(self, round: int, state: Dict[str, Any]) -> Path:
        path = self.folder / f"round_{round:08d}.pt"
        packed = {"format": FORMAT, **pack(state)}
        write_file(path, lambda f: torch.save(packed, f), sync=True)
        for _, old in self.paths()[: -self.keep]:
            with guard(old, "remove"):
                old.unlink(missing_ok=True)
        return path

    @staticmethod
    def load(path: Path) -> Dict[str, Any]:
        try:
            raw = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise FedbenchError(f"Checkpoint {path} cannot be read ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else 'corrupted'}). Fix: delete it to "
                                "resume from an older checkpoint, or start the run afresh.") from None
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise FedbenchError(f"Checkpoint {path} is not a fedbench checkpoint of format {FORMAT}. "
                                "Fix: resume with the fedbench version that wrote it, or start afresh.")
        return unpack(raw)

    def latest(self) -> Optional[Tuple[Path, Dict[str, Any]]]:
        """The newest readable checkpoint (an unreadable one is reported and skipped), or None."""
        for _, path in reversed(self.paths()):
            try:
                return path, self.load(path)
            except FedbenchError as exc:
                print(f"fedbench: warning: {exc}", flush=True)
        return None
