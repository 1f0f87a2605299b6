"""The drop contract's settings that the DAG exposes as params and prepare takes as flags (one definition each;
standard library only, so the Airflow side imports it without Spark)."""
from __future__ import annotations

# How many days train.csv's latest row may lie before the as-of date (late actuals); 0: the drop must hold the
# actuals of the as-of date itself (features/freshness.py).
DEFAULT_MAX_STALENESS_DAYS = 0
MAX_STALENESS_DAYS_LIMIT = 366

# Whether a drop closed by an empty `_SUCCESS` marker (Hadoop's own, a `touch`: no manifest, so the files cannot be
# checked against what was landed) may be prepared. Allowed by default: the embedded demo's lander writes a
# manifest either way, and a supplier's plain marker still works; a deployment whose suppliers write manifests
# turns it off, so an unverifiable drop fails prepare. Either way the run's report says when a drop was unverified.
ALLOW_UNVERIFIED_DROP = True
UNVERIFIED_DROP_WARNING = "the raw files are not verified against a manifest"
