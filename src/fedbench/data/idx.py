"""Reader and writer for the IDX format of (Fashion-)MNIST / EMNIST, plain or gzip-compressed."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"),
           0x0E: np.dtype(">f8")}
_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09}


def read_idx(path: str | Path) -> np.ndarray:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _DTYPES:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    dtype, ndim = np.dtype(_DTYPES[data[2]]), data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    offset = 4 + 4 * ndim
    count = int(np.prod(shape)) if shape else 0
    if len(data) - offset != count * dtype.itemsize:
        raise ValueError(f"{path}: header says shape {shape} but the payload has {len(data) - offset} bytes")
    return np.frombuffer(data, dtype=dtype, offset=offset).reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write ``array`` (uint8 or int8) as an IDX file; gzip-compressed when the name ends in ``.gz``."""
    path = Path(path)
    array = np.ascontiguousarray(array)
    header = bytes([0, 0, _CODES[array.dtype], array.ndim]) + b"".join(
        int(s).to_bytes(4, "big") for s in array.shape
    )
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(header + array.tobytes())
