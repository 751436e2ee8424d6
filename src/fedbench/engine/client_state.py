"""The client-state store: per-client vectors (memories, control variates) shared by every algorithm.

An algorithm asks for a named table with ``Algorithm.declare_table``; the table lives here, not in the algorithm,
so every algorithm gets the same backends and accounting:

* ``memory`` (default): a row is allocated when a client is first written, on the run's device, so the cost is
  (clients seen) x d floats;
* ``memmap``: one float32 (N, d) file per table under ``engine.client_state_dir`` (default
  ``<run dir>/client_state``); the OS pages rows in and out, so N x d may exceed RAM. Files are sparse until
  written.

Unwritten rows read as zeros. ``summary.json`` reports the bytes held (``client_state``). A table may have its
own number of rows (e.g. GradMA's m memory slots) and be ``dense``: one (rows, d) tensor allocated up front, so
that ``matrix()`` hands the whole table to a matrix product without copies (a memmap table is dense already).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch


class ClientTable:
    def __init__(self, name: str, num_clients: int, dim: int, device: torch.device, folder: Optional[Path],
                 dense: bool = False):
        self.name, self.num_clients, self.dim, self.device = name, num_clients, dim, device
        self.seen = np.zeros(num_clients, dtype=bool)
        self.rows: Dict[int, torch.Tensor] = {}
        self.array = None
        self.dense = torch.zeros(num_clients, dim, device=device) if dense and folder is None else None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{name.replace('/', '.')}.f32"
            self.array = np.memmap(path, dtype=np.float32, mode="w+", shape=(num_clients, dim))

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

    def set(self, client: int, value: torch.Tensor) -> None:
        self.seen[client] = True
        if self.dense is not None:
            self.dense[client].copy_(value.detach())
        elif self.array is None:  # a fresh tensor: rows handed out by ``get`` stay valid (read-only by convention)
            self.rows[client] = value.detach().to(self.device, torch.float32, copy=True)
        else:
            self.array[client] = value.detach().to("cpu", torch.float32).numpy()

    def discard(self, client: int) -> None:
        """Forget ``client``'s row (it reads as zeros again and no longer counts in ``nbytes``)."""
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


class ClientStateStore:
    def __init__(self, num_clients: int, device: torch.device, backend: str = "memory",
                 folder: Optional[Path] = None):
        if backend not in ("memory", "memmap"):
            raise ValueError(f"unknown client-state backend {backend!r}")
        self.num_clients, self.device, self.backend = num_clients, device, backend
        self.folder = Path(folder) if folder is not None else None
        self.tables: Dict[str, ClientTable] = {}

    def table(self, name: str, dim: int, rows: Optional[int] = None, dense: bool = False) -> ClientTable:
        """A (rows, dim) table; ``rows`` defaults to the number of clients."""
        if name in self.tables:
            raise ValueError(f"client-state table '{name}' declared twice")
        folder = self.folder if self.backend == "memmap" else None
        self.tables[name] = ClientTable(name, rows or self.num_clients, dim, self.device, folder, dense)
        return self.tables[name]

    def report(self) -> Dict[str, object]:
        """What ``summary.json`` records: backend, bytes held and rows written per table."""
        return {
            "backend": self.backend,
            "bytes": sum(t.nbytes for t in self.tables.values()),
            "tables": {name: int(t.seen.sum()) for name, t in self.tables.items()},
        }
