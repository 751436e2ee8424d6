"""The client-state store: per-client vectors (memories, control variates) shared by every algorithm.

An algorithm asks for a named table with ``Algorithm.declare_table``; the table lives here, not in the algorithm,
so every algorithm gets the same backends and accounting:

* ``memory`` (default): a row is allocated when a client is first written, on the run's device, so the cost is
  (clients seen) x d floats;
* ``memmap``: one float32 (N, d) file per table under ``engine.client_state_dir`` (default
  ``<run dir>/client_state``); the OS pages rows in and out, so N x d may exceed RAM. A new file's blocks are
  reserved when it is created (``posix_fallocate``), so a full disk is a ``StorageFault`` at the start, not a
  SIGBUS in the middle of a round.

Unwritten rows read as zeros. ``summary.json`` reports the bytes held (``client_state``). A table may have its
own number of rows (e.g. GradMA's m memory slots) and be ``dense``: one (rows, d) tensor allocated up front, so
that ``matrix()`` hands the whole table to a matrix product without copies (a memmap table is dense already).

Checkpoints (``snapshot`` / ``restore``): in-memory tables are copied into the checkpoint; memmap tables are kept
by reference. Their files are flushed at each checkpoint, and from then on the first write to a row appends the
row's previous value to an undo log (``<table>.undo``, tagged with the checkpoint's round), so a run killed between
checkpoints is rolled back to its latest checkpoint exactly; older checkpoints cannot restore a memmap table.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch

from fedbench.storage import guard, open_for_writing, write_bytes


class ClientTable:
    def __init__(self, name: str, num_clients: int, dim: int, device: torch.device, folder: Optional[Path],
                 dense: bool = False, reuse: bool = False):
        self.name, self.num_clients, self.dim, self.device = name, num_clients, dim, device
        self.seen = np.zeros(num_clients, dtype=bool)
        self.rows: Dict[int, torch.Tensor] = {}
        self.array = None
        self.dense = torch.zeros(num_clients, dim, device=device) if dense and folder is None else None
        self.undo_path: Optional[Path] = None
        self._logged: Optional[set] = None  # rows whose pre-checkpoint value is in the undo log (None: no log)
        if folder is not None:
            path = folder / f"{name.replace('/', '.')}.f32"
            self.undo_path = path.with_suffix(".undo")
            size = num_clients * dim * 4
            with guard(path, "create"):
                folder.mkdir(parents=True, exist_ok=True)
                if not (reuse and path.is_file() and path.stat().st_size == size):
                    with open_for_writing(path, "w", text=False) as f:
                        if size:
                            os.posix_fallocate(f.fileno(), 0, size)
                self.array = np.memmap(path, dtype=np.float32, mode="r+", shape=(num_clients, dim))

    def __contains__(self, client: int) -> bool:
        return bool(self.seen[client])

    def get(self, client: int) -> torch.Tensor:
        """Client ``client``'s row (zeros if never written), as a tensor on the run's device."""
        if not self.seen[client]:
            return torch.zeros(self.dim, device=self.device)
        if self.dense is not None:
            return self.dense[client].clone()
        if self.array is None:
            return self.rows[client]
        return torch.from_numpy(np.array(self.array[client])).to(self.device)

    def _before_write(self, client: int) -> None:
        """Undo log: the row's value as of the latest checkpoint, saved before its first change since then."""
        if self._logged is None or client in self._logged:
            return
        entry = np.zeros(1, dtype=self._undo_dtype())
        entry["client"], entry["seen"], entry["row"] = client, self.seen[client], self.array[client]
        with guard(self.undo_path, "append to"), open_for_writing(self.undo_path, "a", text=False) as f:
            f.write(entry.tobytes())
        self._logged.add(client)

    def _undo_dtype(self) -> np.dtype:
        return np.dtype([("client", "<i8"), ("seen", "u1"), ("row", "<f4", (self.dim,))])

    def set(self, client: int, value: torch.Tensor) -> None:
        if self.array is not None:
            self._before_write(client)
        self.seen[client] = True
        if self.dense is not None:
            self.dense[client].copy_(value.detach())
        elif self.array is None:  # a fresh tensor: rows handed out by ``get`` stay valid (read-only by convention)
            self.rows[client] = value.detach().to(self.device, torch.float32, copy=True)
        else:
            self.array[client] = value.detach().to("cpu", torch.float32).numpy()

    def discard(self, client: int) -> None:
        """Forget ``client``'s row (it reads as zeros again and no longer counts in ``nbytes``)."""
        if self.array is not None:
            self._before_write(client)
        self.seen[client] = False
        self.rows.pop(client, None)
        if self.dense is not None:
            self.dense[client].zero_()
        elif self.array is not None:
            self.array[client] = 0

    def matrix(self) -> torch.Tensor:
        """The whole (rows, d) table without a copy (dense or memmap tables; a memmap one on the CPU). Rows never
        written, or discarded, are zeros."""
        if self.dense is not None:
            return self.dense
        if self.array is None:
            raise ValueError(f"client-state table '{self.name}' is not dense; declare it with dense=True")
        return torch.from_numpy(self.array)

    def repeated_rows(self, ids: np.ndarray) -> Dict[int, torch.Tensor]:
        """Current rows of the clients listed more than once in ``ids`` (a round drawn with replacement), so that
        their later entries can use the row as it was at the start of the round."""
        uniq, counts = np.unique(ids, return_counts=True)
        return {int(i): self.get(int(i)) for i in uniq[counts > 1]}

    @property
    def nbytes(self) -> int:
        rows = self.num_clients if self.dense is not None else int(self.seen.sum())
        return rows * self.dim * 4

    def state(self) -> Dict[str, torch.Tensor]:
        ids = np.flatnonzero(self.seen)
        rows = torch.stack([self.get(int(i)) for i in ids]) if ids.size else torch.zeros(0, self.dim)
        return {"ids": torch.from_numpy(ids), "rows": rows}

    def load(self, state: Dict[str, torch.Tensor]) -> None:
        self.seen[:] = False
        self.rows.clear()
        for i, row in zip(state["ids"].tolist(), state["rows"]):
            self.set(i, row)

    def snapshot(self, round: int) -> dict:
        """The table's part of a checkpoint at ``round``: its rows, or for a memmap table the flushed file by
        reference (``commit`` starts its undo log once the checkpoint is on disk)."""
        if self.array is None:
            return {k: v.cpu() for k, v in self.state().items()}
        with guard(self.array.filename, "flush"):
            self.array.flush()
        return {"memmap": str(self.array.filename), "seen": self.seen.copy(), "round": round}

    def commit(self, round: int) -> None:
        """The checkpoint of ``round`` is on disk: log, from now on, the rows changed since it."""
        if self.array is None:
            return
        write_bytes(self.undo_path, np.array([round], dtype="<i8").tobytes())
        self._logged = set()

    def restore(self, snap: dict) -> None:
        if "memmap" not in snap:
            self.load({"ids": snap["ids"], "rows": snap["rows"]})
            return
        if self.array is None:
            raise ValueError(f"client-state table '{self.name}' was checkpointed on the memmap backend")
        blob = self.undo_path.read_bytes() if self.undo_path.is_file() else b""
        tag = int(np.frombuffer(blob[:8], dtype="<i8")[0]) if len(blob) >= 8 else None
        if tag is None or tag > snap["round"]:
            raise ValueError(f"client-state table '{self.name}': its file is past the checkpoint of round "
                             f"{snap['round']} (a memmap table restores only to the latest checkpoint)")
        if tag == snap["round"]:  # rows changed after the checkpoint: put their logged values back
            dtype = self._undo_dtype()
            n = (len(blob) - 8) // dtype.itemsize  # a torn last entry was never applied to the file
            for entry in np.frombuffer(blob[8:8 + n * dtype.itemsize], dtype=dtype)[::-1]:
                self.array[int(entry["client"])] = entry["row"]
        # tag < round: killed between writing the checkpoint and ``commit``; the file is the checkpoint's state
        self.seen[:] = snap["seen"]
        self.array.flush()
        self.commit(snap["round"])


class ClientStateStore:
    def __init__(self, num_clients: int, device: torch.device, backend: str = "memory",
                 folder: Optional[Path] = None, reuse: bool = False):
        if backend not in ("memory", "memmap"):
            raise ValueError(f"unknown client-state backend {backend!r}")
        self.num_clients, self.device, self.backend = num_clients, device, backend
        self.folder = Path(folder) if folder is not None else None
        self.reuse = reuse  # open existing memmap files (resuming) instead of zeroing them
        self.tables: Dict[str, ClientTable] = {}

    def table(self, name: str, dim: int, rows: Optional[int] = None, dense: bool = False) -> ClientTable:
        """A (rows, dim) table; ``rows`` defaults to the number of clients."""
        if name in self.tables:
            raise ValueError(f"client-state table '{name}' declared twice")
        folder = self.folder if self.backend == "memmap" else None
        self.tables[name] = ClientTable(name, rows or self.num_clients, dim, self.device, folder, dense,
                                        self.reuse)
        return self.tables[name]

    def report(self) -> Dict[str, object]:
        """What ``summary.json`` records: backend, bytes held and rows written per table."""
        return {
            "backend": self.backend,
            "bytes": sum(t.nbytes for t in self.tables.values()),
            "tables": {name: int(t.seen.sum()) for name, t in self.tables.items()},
        }

    def snapshot(self, round: int) -> dict:
        return {name: t.snapshot(round) for name, t in self.tables.items()}

    def commit(self, round: int) -> None:
        for t in self.tables.values():
            t.commit(round)

    def restore(self, snap: dict) -> None:
        if set(snap) != set(self.tables):
            raise ValueError(f"client-state tables differ: checkpoint {sorted(snap)}, run {sorted(self.tables)}")
        for name, t in self.tables.items():
            t.restore(snap[name])
