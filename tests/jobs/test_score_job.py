"""The scoring job: past forecasts vs the actual sales of a later drop, model and baseline on the same rows."""
from __future__ import annotations

import base64
import hashlib
import io
import math
import random
from datetime import date, timedelta

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from report_html import ReportPage
from rossmann_jobs import score, storage
from rossmann_jobs.features.drop_verification import check_file_against_manifest
from rossmann_jobs.features.raw_schemas import TRAIN
from rossmann_jobs.features.validate import parse_columns
from rossmann_jobs.past_forecasts import records as score_records
from rossmann_jobs.past_forecasts import scores as scoring
from rossmann_jobs.past_forecasts.records import (
    ScoringInputError,
    median_ratio_by_lead_week,
    merge_summary,
    pooled,
)
from rossmann_jobs.reporting import scores_page

D0_A, D0_B, SCORING_DATE = date(2015, 8, 1), date(2015, 8, 3), date(2015, 8, 4)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Forecast A (as of 08-01): store 1 and 2 over 08-02..08-04; store 2 has no row for 08-04 and is closed on 08-02.
FORECAST_A = [(1, "2015-08-02", 110.0, 90.0), (1, "2015-08-03", 100.0, 100.0), (1, "2015-08-04", 50.0, 50.0),
              (2, "2015-08-02", 0.0, 0.0), (2, "2015-08-03", 200.0, 150.0)]
# Forecast B (as of 08-03): stores 1 and 2 over 08-04..08-05, and a row on its own as-of date that must not count.
FORECAST_B = [(2, "2015-08-03", 1.0, 1.0), (1, "2015-08-04", 80.0, 120.0), (2, "2015-08-04", 100.0, 50.0),
              (1, "2015-08-05", 90.0, 90.0)]
# Actual sales in the drop for 08-04 (plus rows the scoring must leave out, see the comments).
ACTUALS = [(1, "2015-08-01", 999),   # the as-of date of A itself: known when A was made
           (1, "2015-08-02", 100), (1, "2015-08-03", 0),  # Sales 0: not scored
           (1, "2015-08-04", 100), (2, "2015-08-02", 100), (2, "2015-08-03", 200),
           (2, "2015-08-04", 100),   # A has no row for it: scored as forecast 0
           (3, "2015-08-02", 100)]   # a store no forecast covers


def _exact_a() -> dict:
    model = {"all": math.sqrt((0.01 + 0.25 + 1 + 0 + 1) / 5), 1: math.sqrt((0.01 + 1) / 2), 2: 0.0,
             3: math.sqrt((0.25 + 1) / 2), "s1": math.sqrt((0.01 + 0.25) / 2), "s2": math.sqrt(2 / 3)}
    baseline = {"all": math.sqrt((0.01 + 0.25 + 1 + 0.0625 + 1) / 5), 1: math.sqrt((0.01 + 1) / 2), 2: 0.25,
                3: math.sqrt((0.25 + 1) / 2), "s1": math.sqrt((0.01 + 0.25) / 2), "s2": math.sqrt(2.0625 / 3)}
    return {"model": model, "baseline": baseline}


def raw_train_lines(rows: list[tuple[int, str, int]], extra: list[str] = ()) -> list[str]:
    lines = [",".join(TRAIN.column_names)]
    lines += [f"{store},{date.fromisoformat(day).isoweekday()},{day},{sales},{sales // 10},{int(sales > 0)},0,0,0"
              for store, day, sales in rows]
    return lines + list(extra)


def forecast_frame(spark, key: str, as_of: date, rows):
    """scoring.FORECAST_COLUMNS of a forecast without quantiles (null, as read from older predictions)."""
    df = spark.createDataFrame([(s, date.fromisoformat(d), f, b) for s, d, f, b in rows],
                               "StoreId int, Date date, SalesForecast double, SalesBaseline double")
    quantiles = [f"CAST(NULL AS double) AS {name}" for name in scoring.MODEL_QUANTILES + scoring.BASELINE_QUANTILES]
    return df.selectExpr(f"'{key}' AS {scoring.KEY_COL}", f"DATE'{as_of}' AS {scoring.AS_OF_COL}", "*", *quantiles)


def parsed_actuals(spark, lines: list[str]):
    """Lines as Spark's PERMISSIVE CSV reader gives them to prepare: a short line null-padded, kept as corrupt."""
    width = len(TRAIN.column_names)
    rows = []
    for line in lines[1:]:
        fields = line.split(",")
        rows.append(tuple((fields + [None] * width)[:width]) + (None if len(fields) == width else line,))
    return parse_columns(spark.createDataFrame(rows, TRAIN.text_schema()), TRAIN)


def score_table(scored, by: list[str]):
    """scores() per forecast and `by` (what score.py's one aggregation gives each grouping: checked below)."""
    return scored.groupBy(scoring.KEY_COL, *by).agg(*scoring.scores()).orderBy(scoring.KEY_COL, *by)


@pytest.fixture(scope="module")
def tables(spark):
    actuals = scoring.actual_sales(parsed_actuals(spark, raw_train_lines(ACTUALS + [(1, "2015-08-05", 100)])),
                                   D0_A, SCORING_DATE)
    forecasts = forecast_frame(spark, "A", D0_A, FORECAST_A).unionByName(forecast_frame(spark, "B", D0_B, FORECAST_B))
    scored = scoring.scored_rows(forecasts, actuals, SCORING_DATE)
    return {"rows": scored.toPandas(),
            **{name: score_table(scored, by).toPandas().set_index(scoring.KEY_COL)
               for name, by in (("overall", []), ("lead", [scoring.LEAD_COL]), ("store", ["StoreId"]))}}


def test_actuals_are_acceptable_unique_positive_and_in_the_window(spark):
    lines = raw_train_lines(ACTUALS + [(4, "2015-08-02", 50), (4, "2015-08-02", 60)],   # a key given twice
                            ["5,7,2015-08-02,abc,1,1,0,0,0", "6,7,2015-08-02,70,7,1,0,0"])  # unparseable, short
    got = scoring.actual_sales(parsed_actuals(spark, lines), D0_A, date(2015, 8, 3)).toPandas()
    assert sorted(zip(got["StoreId"], got["Date"].astype(str), got["SalesActual"])) == [
        (1, "2015-08-02", 100.0), (2, "2015-08-02", 100.0), (2, "2015-08-03", 200.0), (3, "2015-08-02", 100.0)]


def test_only_days_after_the_as_of_date_up_to_the_scoring_date_with_sales_are_scored(tables):
    rows = tables["rows"]
    a = rows[rows[scoring.KEY_COL] == "A"].sort_values(["StoreId", "Date"])
    assert list(zip(a["StoreId"], a["Date"].astype(str), a[scoring.LEAD_COL])) == [
        (1, "2015-08-02", 1), (1, "2015-08-04", 3), (2, "2015-08-02", 1), (2, "2015-08-03", 2), (2, "2015-08-04", 3)]
    missing = a[~a[scoring.HAS_FORECAST_COL]]
    assert list(zip(missing["StoreId"], missing["SalesForecast"], missing["SalesBaseline"])) == [(2, 0.0, 0.0)]
    b = rows[rows[scoring.KEY_COL] == "B"].sort_values("StoreId")
    # 08-03 is B's as-of date (its actual was known), 08-05 is after D
    assert list(zip(b["StoreId"], b["Date"].astype(str), b[scoring.LEAD_COL])) == [(1, "2015-08-04", 1),
                                                                                 (2, "2015-08-04", 1)]


def test_exp_rmspe_overall_per_lead_day_and_store_for_model_and_baseline(tables):
    exact = _exact_a()
    overall, lead, store = tables["overall"], tables["lead"], tables["store"]
    assert overall.loc["A", "rows"] == 5 and overall.loc["A", "days"] == 3
    assert overall.loc["A", "rows_without_forecast"] == 1
    assert overall.loc["A", "model_exp_rmspe"] == pytest.approx(exact["model"]["all"])
    assert overall.loc["A", "baseline_exp_rmspe"] == pytest.approx(exact["baseline"]["all"])
    lead_a = lead.loc["A"].set_index(scoring.LEAD_COL)
    assert lead_a["rows"].to_dict() == {1: 2, 2: 1, 3: 2}
    for day in (1, 2, 3):
        assert lead_a.loc[day, "model_exp_rmspe"] == pytest.approx(exact["model"][day])
        assert lead_a.loc[day, "baseline_exp_rmspe"] == pytest.approx(exact["baseline"][day])
    store_a = store.loc["A"].set_index("StoreId")
    assert store_a.loc[1, "model_exp_rmspe"] == pytest.approx(exact["model"]["s1"])
    assert store_a.loc[2, "model_exp_rmspe"] == pytest.approx(exact["model"]["s2"])
    assert store_a.loc[2, "baseline_exp_rmspe"] == pytest.approx(exact["baseline"]["s2"])
    assert overall.loc["B", "rows"] == 2
    assert overall.loc["B", ["model_exp_rmspe", "baseline_exp_rmspe"]].tolist() == pytest.approx(
        [math.sqrt(0.04 / 2), math.sqrt((0.04 + 0.25) / 2)])


def test_median_forecast_over_actual_ratio_counts_a_missing_forecast_row_as_0(tables):
    # A's rows, forecast / actual: model 1.1, 0.5 (store 1), 0, 1.0 and 0 (store 2; no row for 08-04),
    # baseline 0.9, 0.5, 0, 0.75, 0: medians 0.5 and 0.5; lead day 1 (1.1, 0 / 0.9, 0) interpolates to 0.55 / 0.45.
    overall, lead, store = tables["overall"], tables["lead"], tables["store"]
    assert overall.loc["A", ["model_median_ratio", "baseline_median_ratio"]].tolist() == pytest.approx([0.5, 0.5])
    lead_a = lead.loc["A"].set_index(scoring.LEAD_COL)
    assert lead_a.loc[1, ["model_median_ratio", "baseline_median_ratio"]].tolist() == pytest.approx([0.55, 0.45])
    store_a = store.loc["A"].set_index("StoreId")
    assert store_a["model_median_ratio"].tolist() == pytest.approx([0.8, 0.0])
    assert store_a["baseline_median_ratio"].tolist() == pytest.approx([0.7, 0.0])
    assert overall.loc["B", ["model_median_ratio", "baseline_median_ratio"]].tolist() == pytest.approx([0.9, 0.85])


def test_lead_week_is_the_ceiling_of_lead_day_over_7(spark):
    as_of = date(2015, 6, 1)
    days = [as_of + timedelta(days=lead) for lead in (1, 7, 8, 14, 15, 42, 43, 48)]
    forecasts = forecast_frame(spark, "W", as_of, [(1, day.isoformat(), 10.0, 10.0) for day in days])
    actuals = spark.createDataFrame([(1, day, 10.0) for day in days], "StoreId int, Date date, SalesActual double")
    rows = scoring.scored_rows(forecasts, actuals, date(2015, 7, 19)).orderBy("Date").toPandas()
    assert list(zip(rows[scoring.LEAD_COL], rows[scoring.LEAD_WEEK_COL])) == [
        (1, 1), (7, 1), (8, 2), (14, 2), (15, 3), (42, 6), (43, 7), (48, 7)]


def test_a_forecast_without_baseline_rows_has_no_baseline_score(spark):
    actuals = scoring.actual_sales(parsed_actuals(spark, raw_train_lines(ACTUALS)), D0_A, SCORING_DATE)
    forecasts = forecast_frame(spark, "A", D0_A, [(s, d, f, None) for s, d, f, _b in FORECAST_A])
    table = score_table(scoring.scored_rows(forecasts, actuals, SCORING_DATE), []).first()
    assert table["baseline_exp_rmspe"] is None and table["model_exp_rmspe"] == pytest.approx(_exact_a()["model"]["all"])


def test_pooled_scores_and_the_latest_scoring_date_wins():
    assert pooled([(2, 0.1), (1, 0.4)]) == pytest.approx(math.sqrt((2 * 0.01 + 0.16) / 3))
    assert pooled([(2, 0.1), (1, None)]) is None and pooled([]) is None
    base = {"status": "scored", "rows": 1, "model_exp_rmspe": 0.1, "baseline_exp_rmspe": 0.2, "by_lead_day": []}
    later = merge_summary(None, {"k": {**base, "scoring_date": "2015-08-05"}})
    backfill = merge_summary(later, {"k": {**base, "scoring_date": "2015-08-04", "rows": 9}})
    assert backfill["forecasts"]["k"]["rows"] == 1 and backfill["scored_through"] == "2015-08-05"
    # The recent check follows the same rule: a run for an earlier date keeps the later one's.
    later = merge_summary(None, {}, {"scoring_date": "2015-08-05", "rows": 1})
    assert merge_summary(later, {}, {"scoring_date": "2015-08-04", "rows": 9})["recent"]["rows"] == 1
    assert merge_summary(later, {}, {"scoring_date": "2015-08-05", "rows": 2})["recent"]["rows"] == 2
    assert merge_summary(later, {}, None)["recent"]["rows"] == 1 and merge_summary(None, {})["recent"] is None


# --- quantile forecasts: interval coverage and weighted quantile loss ---------------------------------------------

QUANTILE_AS_OF = date(2015, 8, 1)
# (day after the as-of date, actual, model P10/P50/P90, baseline P10/P50/P90); day 4 has no forecast row (0s), day 5
# no actual.
QUANTILE_ROWS = [(1, 100, (90, 100, 110), (0, 1000, 2000)), (2, 200, (150, 180, 190), (0, 1000, 2000)),
                 (3, 300, (310, 320, 330), (0, 1000, 2000)), (4, 400, None, None), (5, None, (1, 2, 3), (1, 2, 3))]


def quantile_forecast_frame(spark, key: str, as_of: date, rows):
    """A forecast with quantile columns: (store, date, forecast, model P10/P50/P90, baseline P10/P50/P90)."""
    columns = ["StoreId", "Date", "SalesForecast", "SalesBaseline", *scoring.MODEL_QUANTILES,
               *scoring.BASELINE_QUANTILES]
    df = spark.createDataFrame([(store, day, float(q[1]), float(b[1]), *map(float, q), *map(float, b))
                                for store, day, q, b in rows],
                               ", ".join(f"{c} {'int' if c == 'StoreId' else 'date' if c == 'Date' else 'double'}"
                                         for c in columns))
    return df.selectExpr(f"'{key}' AS {scoring.KEY_COL}", f"DATE'{as_of}' AS {scoring.AS_OF_COL}", "*")


def test_interval_coverage_and_weighted_quantile_loss_on_a_hand_made_case(spark):
    """Model: day 1 inside its P10-P90, day 2 above, day 3 below, day 4 without a forecast row (quantiles 0): 1 of
    4 covered. Pinball losses per level (0.1, 0.5, 0.9): day 1 1, 0, 1; day 2 5, 10, 9; day 3 9, 10, 3; day 4 40,
    200, 360: wQL = mean over levels of 2 sum / sum(actual) = (0.11 + 0.44 + 0.746) / 3. Baseline (0, 1000, 2000):
    3 of 4 covered; losses 0.1 x y, 0.5 x (1000 - y), 0.1 x (2000 - y), then day 4's."""
    day = lambda lead: QUANTILE_AS_OF + timedelta(days=lead)   # noqa: E731
    forecasts = quantile_forecast_frame(spark, "Q", QUANTILE_AS_OF,
                                        [(1, day(lead), q, b) for lead, _y, q, b in QUANTILE_ROWS if q])
    actuals = spark.createDataFrame([(1, day(lead), float(y)) for lead, y, _q, _b in QUANTILE_ROWS if y],
                                    "StoreId int, Date date, SalesActual double")
    scored = scoring.scored_rows(forecasts, actuals, day(5))
    overall = score_table(scored, []).first()
    assert overall["rows"] == 4 and overall["rows_without_forecast"] == 1
    assert overall["model_interval_coverage"] == pytest.approx(0.25)
    assert overall["model_quantile_loss"] == pytest.approx((0.11 + 0.44 + 0.746) / 3)
    assert overall["baseline_interval_coverage"] == pytest.approx(0.75)
    assert overall["baseline_quantile_loss"] == pytest.approx((0.2 + 2.8 + 1.8) / 3)
    by_lead = {row[scoring.LEAD_COL]: row for row in score_table(scored, [scoring.LEAD_COL]).collect()}
    assert [by_lead[lead]["model_interval_coverage"] for lead in (1, 2, 3, 4)] == [1.0, 0.0, 0.0, 0.0]
    assert by_lead[1]["model_quantile_loss"] == pytest.approx((0.02 + 0 + 0.02) / 3)
    # A held row without quantiles (a forecast made before predict wrote them) leaves the quantiles unscored.
    partial = forecasts.withColumn("SalesP90", F.when(F.col("Date") == day(1), None).otherwise(F.col("SalesP90")))
    unscored = score_table(scoring.scored_rows(partial, actuals, day(5)), []).first()
    assert unscored["model_interval_coverage"] is None and unscored["model_quantile_loss"] is None
    assert unscored["baseline_interval_coverage"] == pytest.approx(0.75)


def test_every_grouping_in_one_aggregation_scores_as_a_query_per_grouping_does(spark):
    """score.py scores every grouping of the scored rows in one aggregation (scoring.grouped_scores): each
    grouping's rows equal those of its own groupBy, row for row, and none leaks into another grouping."""
    day = lambda lead: QUANTILE_AS_OF + timedelta(days=lead)   # noqa: E731
    forecasts = quantile_forecast_frame(spark, "Q", QUANTILE_AS_OF,
                                        [(store, day(lead), q, b) for lead, _y, q, b in QUANTILE_ROWS if q
                                         for store in (1, 2)])
    actuals = spark.createDataFrame([(store, day(lead), float(y) * store) for lead, y, _q, _b in QUANTILE_ROWS
                                     if y for store in (1, 2)], "StoreId int, Date date, SalesActual double")
    scored = scoring.scored_rows(forecasts, actuals, day(5)).unionByName(
        scoring.scored_rows(forecasts.withColumn(scoring.KEY_COL, F.lit("R")), actuals, day(3))).cache()
    one_pass = scoring.grouped_scores(scored, score.GROUPINGS).toPandas()
    assert sorted(set(one_pass[scoring.GROUPING_COL])) == sorted(score.GROUPINGS)
    for name, by in score.GROUPINGS.items():
        mine = (one_pass[one_pass[scoring.GROUPING_COL] == name].drop(columns=scoring.GROUPING_COL)
                .sort_values([scoring.KEY_COL, *by]).reset_index(drop=True))
        assert mine[[c for c in score.GROUPING_COLUMNS if c not in by]].isna().all().all()
        alone = (scored.groupBy(scoring.KEY_COL, *by).agg(*scoring.scores()).toPandas()
                 .sort_values([scoring.KEY_COL, *by]).reset_index(drop=True))
        assert len(alone) == len(mine) > 1 or name == "overall"
        pd.testing.assert_frame_equal(mine[alone.columns], alone, check_dtype=False)
    by_grouping = score.scores_by_grouping(scored)
    assert [entry["lead_day"] for entry in by_grouping["lead_day"]["Q"]] == [1, 2, 3, 4]
    assert [entry["store"] for entry in by_grouping["store"]["R"]] == [1, 2]
    assert list(by_grouping["store"]["R"][0])[:2] == ["store", "rows"]   # the records' key order, as before
    assert "rows" in by_grouping["overall"]["Q"][0] and len(by_grouping["overall"]["Q"]) == 1


def test_a_too_narrow_interval_is_reported_as_under_covering(spark):
    """P10 and P90 within 0.1 % of an unbiased forecast, actuals 5 % off either way: the interval covers nothing;
    the record and summary call it under-covering, and the report lists it."""
    as_of, days = date(2015, 6, 1), range(1, 49)
    rows = [(store, as_of + timedelta(days=lead), (999.0, 1000.0, 1001.0), (900.0, 1000.0, 1100.0))
            for store in (1, 2) for lead in days]
    forecasts = quantile_forecast_frame(spark, "N", as_of, rows)
    actuals = spark.createDataFrame([(store, day, 1000.0 * (1.05 if (lead + store) % 2 else 0.95))
                                     for (store, day, _q, _b), lead in zip(rows, list(days) * 2)],
                                    "StoreId int, Date date, SalesActual double")
    scored = scoring.scored_rows(forecasts, actuals, as_of + timedelta(days=48))
    overall = score_table(scored, []).first().asDict()
    weeks = [row.asDict() for row in score_table(scored, [scoring.LEAD_WEEK_COL]).collect()]
    assert overall["model_interval_coverage"] == 0.0 and overall["baseline_interval_coverage"] == 1.0
    assert overall["model_quantile_loss"] > overall["baseline_quantile_loss"]
    record = score_records.forecast_record(
        {"as_of": as_of.isoformat(), "run_id": "narrow", "run_key": "narrow", "predictions_uri": "p"},
        as_of + timedelta(days=48), "raw", None, {k: v for k, v in overall.items() if k != scoring.KEY_COL}, [],
        [], [{**{k: v for k, v in w.items() if k != scoring.KEY_COL}, "lead_week": w[scoring.LEAD_WEEK_COL]}
             for w in weeks], (0.1, 0.5, 0.9))
    assert record["interval_nominal"] == pytest.approx(0.8) and record["interval_verdict"] == "under-covering"
    summary = merge_summary(None, {"k": score_records.summary_entry(record, "uri")})
    assert summary["forecasts"]["k"]["interval_verdict"] == "under-covering"
    assert summary["overall"]["model_interval_coverage"] == 0.0
    calibration = score_records.coverage_by_lead_week(summary)
    assert [(week, rows) for week, rows, *_ in calibration] == [(w, 14) for w in range(1, 7)] + [(7, 12)]
    assert all(model == 0.0 and baseline == 1.0 for _w, _r, model, baseline, _lm, _lb in calibration)
    page = scores_page.index_html(summary).decode()
    images = ReportPage()
    images.feed(page)
    assert len(images.sources) == 4     # lead day, bias, over time, calibration
    assert "forecasts whose interval is under-covering</th><td>2015-06-01 narrow" in page


def test_interval_verdict_allows_the_tolerance_or_two_standard_errors():
    verdict = score_records.interval_verdict
    assert verdict(0.78, 0.8, 10_000) == "calibrated" and verdict(0.76, 0.8, 10_000) == "under-covering"
    assert verdict(0.84, 0.8, 10_000) == "over-covering"
    assert verdict(0.7, 0.8, 50) == "calibrated"       # 2 x sqrt(0.16 / 50) = 0.113: too few rows to tell
    assert verdict(None, 0.8, 50) is None and verdict(0.5, 0.8, 0) is None


# --- the job, end to end on local files -----------------------------------------------------------------------

def write_predictions(root: str, rows, extra_days: int = 0) -> str:
    """A committed predict attempt's predictions/ (test split only; the columns the job reads and a few more)."""
    frame = pd.DataFrame(rows, columns=["StoreId", "Date", "SalesForecast", "SalesBaseline"])
    frame["Date"] = [date.fromisoformat(d) for d in frame["Date"]]
    frame.insert(0, "Id", range(1, len(frame) + 1))
    frame["OpenStatus"] = ["closed" if f == 0 else "open" for f in frame["SalesForecast"]]
    uri = storage.join(root, "predictions")
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buffer)
    storage.write_bytes(storage.join(uri, "split=test", "part-00000.parquet"), buffer.getvalue())
    return uri


def forecast_list(root: str, records: list[dict]) -> str:
    uri = storage.join(root, "forecasts.json")
    storage.write_json(uri, records)
    return uri


@pytest.fixture()
def drop(tmp_path):
    root = str(tmp_path)
    raw = storage.join(root, "raw", SCORING_DATE.isoformat())
    storage.write_bytes(storage.join(raw, "train.csv"), ("\n".join(raw_train_lines(ACTUALS)) + "\n").encode())
    records = [
        {"as_of": D0_A.isoformat(), "run_id": "run a", "run_key": "run_a",
         "predictions_uri": write_predictions(storage.join(root, "a"), FORECAST_A)},
        {"as_of": D0_B.isoformat(), "run_id": "run b", "run_key": "run_b",
         "predictions_uri": write_predictions(storage.join(root, "b"), FORECAST_B)},
        {"as_of": D0_B.isoformat(), "run_id": "run c", "run_key": "run_c",   # its horizon starts after D
         "predictions_uri": write_predictions(storage.join(root, "c"), [(1, "2015-08-10", 5.0, 5.0)])},
    ]
    return {"root": root, "raw": raw, "forecasts": forecast_list(root, records), "out": storage.join(root, "scores")}


def read_tree(uri: str) -> dict[str, bytes]:
    return {f[len(uri) + 1:]: storage.read_bytes(f) for f in storage.list_files(uri)}


@pytest.mark.slow
def test_score_job_writes_records_summary_and_report_and_reruns_identically(spark, drop):
    summary = score.run_score(spark, drop["raw"], SCORING_DATE, drop["forecasts"], drop["out"])
    first = read_tree(drop["out"])
    assert sorted(first) == ["2015-08-01/run_a/2015-08-04.json", "2015-08-03/run_b/2015-08-04.json",
                             "2015-08-03/run_c/2015-08-04.json", "report/index.html", "summary.json"]
    record = storage.read_json(storage.join(drop["out"], "2015-08-01/run_a/2015-08-04.json"))
    exact = _exact_a()
    assert record["status"] == "scored" and record["forecast"]["run_id"] == "run a"
    assert record["horizon"] == {"start": "2015-08-02", "end": "2015-08-04"}
    assert record["overall"]["rows"] == 5 and record["overall"]["days"] == 3
    assert record["overall"]["model_exp_rmspe"] == pytest.approx(exact["model"]["all"], abs=1e-8)
    assert record["overall"]["baseline_exp_rmspe"] == pytest.approx(exact["baseline"]["all"], abs=1e-8)
    assert [(r["lead_day"], r["rows"]) for r in record["by_lead_day"]] == [(1, 2), (2, 1), (3, 2)]
    assert [(r["store"], r["rows"]) for r in record["by_store"]] == [(1, 2), (2, 3)]
    pending = storage.read_json(storage.join(drop["out"], "2015-08-03/run_c/2015-08-04.json"))
    assert pending["status"] == "pending" and pending["overall"] is None

    assert summary == storage.read_json(storage.join(drop["out"], "summary.json"))
    assert summary["pending"] == ["2015-08-03/run_c"] and summary["scored_through"] == "2015-08-04"
    assert summary["overall"]["rows"] == 7 and summary["overall"]["forecasts_scored"] == 2
    assert summary["overall"]["model_exp_rmspe"] == pytest.approx(math.sqrt((2.26 + 0.04) / 7), abs=1e-8)
    assert summary["overall"]["baseline_exp_rmspe"] == pytest.approx(math.sqrt((2.3225 + 0.29) / 7), abs=1e-8)
    entry = summary["forecasts"]["2015-08-01/run_a"]
    assert entry["days_scored"] == 3 and entry["by_lead_day"][1] == [2, 1, 0.0, 0.25]
    assert record["overall"]["model_median_ratio"] == pytest.approx(0.5)
    assert [r["lead_week"] for r in record["by_lead_week"]] == [1] and record["by_lead_week"][0]["rows"] == 5
    # These predictions hold no quantile columns (written before predict had them): no quantile scores.
    assert entry["by_lead_week"] == [[1, 5, record["overall"]["model_exp_rmspe"],
                                      record["overall"]["baseline_exp_rmspe"], 0.5, 0.5, None, None, None, None]]
    assert record["overall"]["model_interval_coverage"] is None and record["interval_verdict"] is None
    # A and B's 7 rows are all in the last 14 days: model ratios 1.1, 0.5, 0, 1, 0 (A) and 0.8, 1 (B).
    recent = summary["recent"]
    assert {key: recent[key] for key in ("scoring_date", "window_days", "dates", "forecasts", "rows", "days")} == {
        "scoring_date": "2015-08-04", "window_days": 14, "dates": {"start": "2015-07-22", "end": "2015-08-04"},
        "forecasts": 2, "rows": 7, "days": 3}
    assert [recent[key] for key in ("model_exp_rmspe", "baseline_exp_rmspe", "model_median_ratio",
                                    "baseline_median_ratio")] == pytest.approx(
        [math.sqrt((2.26 + 0.04) / 7), math.sqrt((2.3225 + 0.29) / 7), 0.8, 0.5], abs=1e-8)

    page = first["report/index.html"].decode()
    images = ReportPage()
    images.feed(page)
    assert len(images.sources) == 3 and all(s.startswith("data:image/png;base64,") for s in images.sources)
    assert all(base64.b64decode(s.split(",", 1)[1]).startswith(PNG_SIGNATURE) for s in images.sources)
    assert "2015-08-03/run_c" in page
    assert "last 14 days (2015-07-22 to 2015-08-04): model median forecast/actual</th><td>0.8000" in page

    score.run_score(spark, drop["raw"], SCORING_DATE, drop["forecasts"], drop["out"])
    assert read_tree(drop["out"]) == first   # an idempotent re-run: byte-identical objects


@pytest.mark.slow
def test_a_later_drop_adds_a_record_and_an_earlier_one_never_replaces_it(spark, drop, tmp_path):
    score.run_score(spark, drop["raw"], SCORING_DATE, drop["forecasts"], drop["out"])
    later = storage.join(drop["root"], "raw", "2015-08-05")
    storage.write_bytes(storage.join(later, "train.csv"),
                        ("\n".join(raw_train_lines(ACTUALS + [(1, "2015-08-05", 100)])) + "\n").encode())
    summary = score.run_score(spark, later, date(2015, 8, 5), drop["forecasts"], drop["out"])
    assert storage.exists(storage.join(drop["out"], "2015-08-03/run_b/2015-08-05.json"))
    assert summary["forecasts"]["2015-08-03/run_b"]["rows"] == 3 and summary["scored_through"] == "2015-08-05"
    assert summary["recent"]["scoring_date"] == "2015-08-05" and summary["recent"]["rows"] == 8
    again = score.run_score(spark, drop["raw"], SCORING_DATE, drop["forecasts"], drop["out"])   # a backfill of 08-04
    assert again["forecasts"]["2015-08-03/run_b"]["scoring_date"] == "2015-08-05"
    assert again["recent"] == summary["recent"]   # the later drop's check stays


def test_bad_forecast_lists_fail_clearly(spark, drop):
    bad = forecast_list(drop["root"], [{"as_of": "2015-08-04", "run_id": "x", "run_key": "x", "predictions_uri": "p"}])
    with pytest.raises(ScoringInputError, match="not before the scoring date 2015-08-04"):
        score.run_score(spark, drop["raw"], SCORING_DATE, bad, drop["out"])
    gone = forecast_list(drop["root"], [{"as_of": "2015-08-01", "run_id": "x", "run_key": "x",
                                         "predictions_uri": storage.join(drop["root"], "nowhere")}])
    with pytest.raises(ScoringInputError, match="re-run the run's publish_forecast"):
        score.run_score(spark, drop["raw"], SCORING_DATE, gone, drop["out"])
    assert not storage.exists(storage.join(drop["out"], "summary.json"))


# --- bias in production: a forecast biased by a known factor, the recent-days check -------------------------------

BIAS = 1.08
BIASED_AS_OF, NOISY_AS_OF, BIAS_SCORING_DATE = date(2015, 6, 1), date(2015, 6, 20), date(2015, 7, 19)
BIASED_STORES, NOISY_STORES = (1, 2, 3), (1, 2, 3, 4, 5)


def daily_sales(store: int, day: date) -> int:
    """Actual sales: a level per store and a weekly-ish wave; store 3 is closed (Sales 0) on Sundays."""
    if store == 3 and day.isoweekday() == 7:
        return 0
    return 1000 + 37 * store + (day.toordinal() * 53) % 400


def horizon_days(as_of: date) -> list[date]:
    return [as_of + timedelta(days=lead) for lead in range(1, 49)]


def bias_scenario() -> dict:
    """Two 48-day forecasts: BIASED (as of 06-01, stores 1-3) is 8 % high on every row (baseline 3 % low), NOISY
    (as of 06-20, stores 1-5) is 5-15 % low by a random factor per row and has no row for store 2 on 07-10, so the
    recent median falls on one of its rows. Scored with 07-19's drop."""
    actuals = {(store, day): daily_sales(store, day) for store in NOISY_STORES
               for day in [BIASED_AS_OF + timedelta(days=n) for n in range(0, 80)] if day <= BIAS_SCORING_DATE}
    known = lambda store, day: actuals.get((store, day), 900)   # noqa: E731 - a day after D has no actual yet
    biased = {(store, day): (known(store, day) * BIAS, known(store, day) * 0.97)
              for store in BIASED_STORES for day in horizon_days(BIASED_AS_OF)}
    noise = random.Random(31)
    noisy = {(store, day): (known(store, day) * noise.uniform(0.85, 0.95), known(store, day) * noise.uniform(0.7, 1.3))
             for store in NOISY_STORES for day in horizon_days(NOISY_AS_OF) if (store, day) != (2, date(2015, 7, 10))}
    return {"actuals": actuals, "forecasts": {"biased": (BIASED_AS_OF, biased), "noisy": (NOISY_AS_OF, noisy)}}


def expected_recent(scenario: dict, scoring_date: date, window_days: int = 14) -> dict:
    """The recent-days numbers computed independently with pandas from the scenario's plain dicts."""
    rows = []
    for name, (as_of, forecast) in scenario["forecasts"].items():
        start, end = min(day for _s, day in forecast), max(day for _s, day in forecast)
        stores = {store for store, _day in forecast}
        for (store, day), sales in scenario["actuals"].items():
            if (sales > 0 and store in stores and as_of < day <= scoring_date and start <= day <= end
                    and day > scoring_date - timedelta(days=window_days)):
                model, baseline = forecast.get((store, day), (0.0, 0.0))
                rows.append({"forecast": name, "day": day, "actual": sales, "model": model, "baseline": baseline})
    frame = pd.DataFrame(rows)

    def exp_rmspe(column: str) -> float:
        return math.sqrt((((frame["actual"] - frame[column]) / frame["actual"]) ** 2).mean())

    return {"forecasts": frame["forecast"].nunique(), "rows": len(frame), "days": frame["day"].nunique(),
            "model_exp_rmspe": exp_rmspe("model"), "baseline_exp_rmspe": exp_rmspe("baseline"),
            "model_median_ratio": (frame["model"] / frame["actual"]).median(),
            "baseline_median_ratio": (frame["baseline"] / frame["actual"]).median()}


@pytest.fixture()
def bias_drop(tmp_path):
    root, scenario = str(tmp_path), bias_scenario()
    raw = storage.join(root, "raw", BIAS_SCORING_DATE.isoformat())
    lines = raw_train_lines([(store, day.isoformat(), sales) for (store, day), sales in scenario["actuals"].items()])
    storage.write_bytes(storage.join(raw, "train.csv"), ("\n".join(lines) + "\n").encode())
    records = [{"as_of": as_of.isoformat(), "run_id": name, "run_key": name,
                "predictions_uri": write_predictions(storage.join(root, name), [
                    (store, day.isoformat(), model, baseline)
                    for (store, day), (model, baseline) in sorted(forecast.items())])}
               for name, (as_of, forecast) in scenario["forecasts"].items()]
    return {"scenario": scenario, "raw": raw, "forecasts": forecast_list(root, records),
            "out": storage.join(root, "scores")}


@pytest.mark.slow
def test_a_biased_forecast_shows_its_factor_as_median_ratio_overall_and_per_lead_week(spark, bias_drop):
    summary = score.run_score(spark, bias_drop["raw"], BIAS_SCORING_DATE, bias_drop["forecasts"], bias_drop["out"])
    record = storage.read_json(storage.join(bias_drop["out"], "2015-06-01/biased/2015-07-19.json"))
    assert record["overall"]["model_median_ratio"] == pytest.approx(BIAS, abs=1e-8)
    assert record["overall"]["baseline_median_ratio"] == pytest.approx(0.97, abs=1e-8)
    assert record["overall"]["model_exp_rmspe"] == pytest.approx(BIAS - 1, abs=1e-8)   # exp-RMSPE alone: no sign
    # Lead days 1-48 of 3 stores (store 3 closed on Sundays): 7 lead weeks, the last one 6 days long.
    sundays = lambda leads: sum((BIASED_AS_OF + timedelta(days=d)).isoweekday() == 7 for d in leads)   # noqa: E731
    expected_rows = [3 * len(leads) - sundays(leads) for leads in (range(7 * w - 6, min(7 * w, 48) + 1)
                                                                   for w in range(1, 8))]
    weeks = record["by_lead_week"]
    assert [(w["lead_week"], w["rows"]) for w in weeks] == list(zip(range(1, 8), expected_rows))
    assert [w["model_median_ratio"] for w in weeks] == pytest.approx([BIAS] * 7, abs=1e-8)
    assert [w["baseline_median_ratio"] for w in weeks] == pytest.approx([0.97] * 7, abs=1e-8)
    entry = summary["forecasts"]["2015-06-01/biased"]
    assert entry["model_median_ratio"] == pytest.approx(BIAS, abs=1e-8)
    assert [row[0] for row in entry["by_lead_week"]] == list(range(1, 8))
    assert [row[4] for row in entry["by_lead_week"]] == pytest.approx([BIAS] * 7, abs=1e-8)
    # Only the biased forecast reaches lead weeks 6 and 7 (the noisy one has lead days up to 29 by 07-19).
    report_weeks = median_ratio_by_lead_week(summary)
    assert [(week, forecasts) for week, forecasts, _m, _b in report_weeks] == [
        (1, 2), (2, 2), (3, 2), (4, 2), (5, 2), (6, 1), (7, 1)]
    assert [model for _w, _f, model, _b in report_weeks[5:]] == pytest.approx([BIAS, BIAS], abs=1e-8)

    recent = summary["recent"]
    assert (recent["scoring_date"], recent["window_days"], recent["dates"]) == (
        "2015-07-19", 14, {"start": "2015-07-06", "end": "2015-07-19"})
    expected = expected_recent(bias_drop["scenario"], BIAS_SCORING_DATE)
    assert {key: recent[key] for key in ("forecasts", "rows", "days")} == {
        key: expected[key] for key in ("forecasts", "rows", "days")}
    # 14 days x 3 and 5 stores less store 3's two Sundays; store 2's 07-10 counts (forecast 0). 108: an even count,
    # so the median is the mean of the two middle rows, both the noisy forecast's.
    assert expected["forecasts"] == 2 and expected["days"] == 14 and expected["rows"] == 40 + 68
    for key in ("model_exp_rmspe", "baseline_exp_rmspe", "model_median_ratio", "baseline_median_ratio"):
        assert recent[key] == pytest.approx(expected[key], abs=1e-8), key
    assert 0.85 < recent["model_median_ratio"] < 0.95   # a noisy row's: both forecasts' rows count


def test_actuals_changed_after_the_drop_closed_are_refused(tmp_path):
    """train.csv is checked against the drop's manifest after the job read it: a file landed again after the drop
    closed fails naming both digests; a drop closed by an empty marker is scored unverified."""
    from rossmann_jobs.features.drop_manifest import manifest_bytes

    raw = tmp_path / "raw"
    raw.mkdir()
    landed = (b"Store,DayOfWeek,Date,Sales,Customers,Open,Promo,StateHoliday,SchoolHoliday\n"
              b"1,2,2015-08-04,100,9,1,0,0,0\n")
    (raw / "train.csv").write_bytes(landed)
    (raw / "_SUCCESS").write_bytes(manifest_bytes({"train.csv": landed}))
    assert check_file_against_manifest(str(raw), "train.csv", ScoringInputError, then="clear score_forecasts") is True
    (raw / "train.csv").write_bytes(landed.replace(b",100,", b",180,"))
    now, _ = storage.sha256(str(raw / "train.csv"))
    with pytest.raises(ScoringInputError, match=rf"train\.csv: SHA-256 {now} .*_SUCCESS lists "
                                                rf"{hashlib.sha256(landed).hexdigest()} .*changed after the drop "
                                                "closed"):
        check_file_against_manifest(str(raw), "train.csv", ScoringInputError, then="clear score_forecasts")
    (raw / "_SUCCESS").write_bytes(b"")
    assert check_file_against_manifest(str(raw), "train.csv", ScoringInputError, then="clear score_forecasts") is False
