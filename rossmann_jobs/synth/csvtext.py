"""Fast CSV text: fields rendered column-wise through lookup tables, then joined row-wise; per-column quoting."""
from __future__ import annotations

from typing import Sequence

import numpy as np

LOOKUP_LIMIT = 1_000_000   # integer columns spanning fewer values render through a lookup table


def quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def minimal(text: str) -> str:
    """Quote only when the field needs it (comma, quote, line break), like csv.QUOTE_MINIMAL."""
    return quoted(text) if any(ch in text for ch in ',"\n\r') else text


def int_field(values: np.ndarray) -> np.ndarray:
    """Object array of decimal strings for an integer array."""
    values = np.asarray(values, dtype=np.int64)
    if values.size == 0:
        return np.array([], dtype=object)
    low, high = int(values.min()), int(values.max())
    if high - low < LOOKUP_LIMIT:
        table = np.array([str(v) for v in range(low, high + 1)], dtype=object)
        return table[values - low]
    return values.astype(str).astype(object)


def optional_number_field(values: np.ndarray, decimals: int = 0) -> np.ndarray:
    """Object array of numbers with `decimals` places; NaN renders as a blank field."""
    values = np.asarray(values, dtype=float)
    text = np.full(values.shape, "", dtype=object)
    present = ~np.isnan(values)
    if decimals == 0:
        text[present] = int_field(np.rint(values[present]).astype(np.int64))
    else:
        text[present] = [f"{v:.{decimals}f}" for v in values[present].tolist()]
    return text


def text_field(values: Sequence[str] | np.ndarray, quote=minimal) -> np.ndarray:
    """Object array of text fields, each passed through `quote` (distinct values are quoted once)."""
    values = np.asarray(values, dtype=object)
    distinct, inverse = np.unique(values, return_inverse=True)
    return np.array([quote(v) for v in distinct.tolist()], dtype=object)[inverse.reshape(values.shape)]


def render(header: Sequence[str], columns: Sequence[np.ndarray]) -> bytes:
    """CSV bytes: a header line, then one line per row of the already-rendered field columns; LF line ends."""
    lengths = {len(column) for column in columns}
    if len(lengths) > 1:
        raise ValueError(f"columns differ in length: {sorted(lengths)}")
    rows = map(",".join, zip(*(column.tolist() for column in columns)))
    return ("\n".join([",".join(minimal(name) for name in header), *rows]) + "\n").encode("utf-8")
