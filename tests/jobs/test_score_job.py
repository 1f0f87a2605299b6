"""The scoring job: past forecasts vs the actual sales of a later drop, model and baseline on the same rows."""
from __future__ import annotations

import base64
import html.parser
import io
import math
from datetime import date

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rossmann_jobs import score, storage
from rossmann_jobs.features.raw_schemas import TRAIN
from rossmann_jobs.features.validate import parse_columns
from rossmann_jobs.forecast import scoring
from rossmann_jobs.forecast.score_records import ScoringInputError, merge_summary, pooled

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
    df = spark.createDataFrame([(s, date.fromisoformat(d), f, b) for s, d, f, b in rows],
                               "StoreId int, Date date, SalesForecast double, SalesBaseline double")
    return df.selectExpr(f"'{key}' AS {scoring.KEY_COL}", f"DATE'{as_of}' AS {scoring.AS_OF_COL}", "*")


def parsed_actuals(spark, lines: list[str]):
    """Lines as Spark's PERMISSIVE CSV reader gives them to prepare: a short line null-padded, kept as corrupt."""
    width = len(TRAIN.column_names)
    rows = []
    for line in lines[1:]:
        fields = line.split(",")
        rows.append(tuple((fields + [None] * width)[:width]) + (None if len(fields) == width else line,))
    return parse_columns(spark.createDataFrame(rows, TRAIN.text_schema()), TRAIN)


@pytest.fixture(scope="module")
def tables(spark):
    actuals = scoring.actual_sales(parsed_actuals(spark, raw_train_lines(ACTUALS + [(1, "2015-08-05", 100)])),
                                   D0_A, SCORING_DATE)
    forecasts = forecast_frame(spark, "A", D0_A, FORECAST_A).unionByName(forecast_frame(spark, "B", D0_B, FORECAST_B))
    scored = scoring.scored_rows(forecasts, actuals, SCORING_DATE)
    return {"rows": scored.toPandas(),
            **{name: scoring.score_table(scored, by).toPandas().set_index(scoring.KEY_COL)
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


def test_a_forecast_without_baseline_rows_has_no_baseline_score(spark):
    actuals = scoring.actual_sales(parsed_actuals(spark, raw_train_lines(ACTUALS)), D0_A, SCORING_DATE)
    forecasts = forecast_frame(spark, "A", D0_A, [(s, d, f, None) for s, d, f, _b in FORECAST_A])
    table = scoring.score_table(scoring.scored_rows(forecasts, actuals, SCORING_DATE), []).first()
    assert table["baseline_exp_rmspe"] is None and table["model_exp_rmspe"] == pytest.approx(_exact_a()["model"]["all"])


def test_pooled_scores_and_the_latest_scoring_date_wins():
    assert pooled([(2, 0.1), (1, 0.4)]) == pytest.approx(math.sqrt((2 * 0.01 + 0.16) / 3))
    assert pooled([(2, 0.1), (1, None)]) is None and pooled([]) is None
    base = {"status": "scored", "rows": 1, "model_exp_rmspe": 0.1, "baseline_exp_rmspe": 0.2, "by_lead_day": []}
    later = merge_summary(None, {"k": {**base, "scoring_date": "2015-08-05"}})
    backfill = merge_summary(later, {"k": {**base, "scoring_date": "2015-08-04", "rows": 9}})
    assert backfill["forecasts"]["k"]["rows"] == 1 and backfill["scored_through"] == "2015-08-05"


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


class _Images(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


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

    page = first["report/index.html"].decode()
    images = _Images()
    images.feed(page)
    assert len(images.sources) == 2 and all(s.startswith("data:image/png;base64,") for s in images.sources)
    assert all(base64.b64decode(s.split(",", 1)[1]).startswith(PNG_SIGNATURE) for s in images.sources)
    assert "2015-08-03/run_c" in page

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
    again = score.run_score(spark, drop["raw"], SCORING_DATE, drop["forecasts"], drop["out"])   # a backfill of 08-04
    assert again["forecasts"]["2015-08-03/run_b"]["scoring_date"] == "2015-08-05"


def test_bad_forecast_lists_fail_clearly(spark, drop):
    bad = forecast_list(drop["root"], [{"as_of": "2015-08-04", "run_id": "x", "run_key": "x", "predictions_uri": "p"}])
    with pytest.raises(ScoringInputError, match="not before the scoring date 2015-08-04"):
        score.run_score(spark, drop["raw"], SCORING_DATE, bad, drop["out"])
    gone = forecast_list(drop["root"], [{"as_of": "2015-08-01", "run_id": "x", "run_key": "x",
                                         "predictions_uri": storage.join(drop["root"], "nowhere")}])
    with pytest.raises(ScoringInputError, match="re-run the run's publish_forecast"):
        score.run_score(spark, drop["raw"], SCORING_DATE, gone, drop["out"])
    assert not storage.exists(storage.join(drop["out"], "summary.json"))
