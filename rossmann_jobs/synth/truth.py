"""Ground truth of a generated data set: the exp-RMSPE noise floor of the oracle prediction, the windows."""
from __future__ import annotations

import datetime as dt
import io
import math

import numpy as np

from rossmann_jobs.metrics import exp_rmspe

ONE_YEAR = dt.timedelta(days=365)


def theoretical_floor(sigma: float) -> float:
    """E-RMSPE of y_hat = mu for y = mu * exp(eps), eps ~ N(0, sigma^2): sqrt(1 - 2 e^(s^2/2) + e^(2 s^2))."""
    return math.sqrt(max(1 - 2 * math.exp(sigma**2 / 2) + math.exp(2 * sigma**2), 0.0))


def best_scaled_floor(sigma: float) -> float:
    """The lowest expected RMSPE of any prediction c * mu: c = exp(-1.5 sigma^2) gives sqrt(1 - e^(-sigma^2))."""
    return math.sqrt(1 - math.exp(-(sigma**2)))


def validation_window(test_first: dt.date, test_last: dt.date) -> tuple[dt.date, dt.date]:
    """First and last day of the reference validation window: Date > test_min - 365 d and Date <= test_max - 365 d."""
    return test_first - ONE_YEAR + dt.timedelta(days=1), test_last - ONE_YEAR


def floor_entry(sales: np.ndarray, expected: np.ndarray) -> dict:
    return {"exp_rmspe": exp_rmspe(sales, expected), "rows": int(np.count_nonzero(sales > 0))}


def expected_values_parquet(columns: dict[str, np.ndarray]) -> bytes:
    """Parquet bytes of the per-row truth (Split, Id, Store, Date, Open, Sales, ExpectedSales, and for test rows
    PointInTimeExpectedSales as known on the last train day)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({
        "Split": pa.array(columns["Split"], pa.string()),
        "Id": pa.array(columns["Id"], pa.int32(), mask=columns["Id"] == 0),
        "Store": pa.array(columns["Store"], pa.int32()),
        "Date": pa.array(columns["Date"].astype("datetime64[D]"), pa.date32()),
        "Open": pa.array(columns["Open"], pa.int8()),
        "Sales": pa.array(columns["Sales"], pa.int32()),
        "ExpectedSales": pa.array(columns["ExpectedSales"], pa.float64()),
        "PointInTimeExpectedSales": pa.array(columns["PointInTimeExpectedSales"], pa.float64(),
                                             mask=np.isnan(columns["PointInTimeExpectedSales"])),
    })
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()
