"""Unit tests of the predict job's pure pieces on tiny hand-made frames (no model training, no spark-submit)."""
from __future__ import annotations

import base64
import math
import re
from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import types as T

import predict_fixtures
from report_html import ReportPage
from rossmann_jobs.features.spec import CATEGORICAL_COLS, FEATURE_COLS
from rossmann_jobs.forecast import metrics
from rossmann_jobs.forecast.open_flag import OPEN_STATUS_COL, with_open_status
from rossmann_jobs.forecast.prepared_checks import ForecastInputError, check_values
from rossmann_jobs.forecast.submission import SubmissionCheckError, check_accounting, check_submission_ids, csv_bytes
from rossmann_jobs.forecast.vocabulary import index_mapping, mappings_to_model, remap_indices
from rossmann_jobs.model import cache as model_cache
from rossmann_jobs.model import files as model_files
from rossmann_jobs.model.broadcast import forecast_batches, predict_log_sales
from rossmann_jobs.model.trust import IncompatibleModelError
from rossmann_jobs.reporting import forecast_page

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_index_mapping_follows_values_and_sends_unseen_to_unknown():
    # feature vocab [a, b, c] -> model vocab [b, c, d]: a unseen by the model, b and c move down by one
    assert index_mapping(["a", "b", "c"], ["b", "c", "d"]) == {0: 0, 1: 0, 2: 1, 3: 2}


def test_mappings_only_for_columns_whose_vocabularies_differ():
    vocabs = predict_fixtures.vocabularies()
    model_vocabs = {**vocabs, "State": ["state_2", "state_0"]}
    mappings = mappings_to_model(vocabs, model_vocabs)
    assert list(mappings) == ["State"]
    assert mappings["State"] == {0: 0, 1: 2, 2: 0, 3: 1}
    assert mappings_to_model(vocabs, vocabs) == {}


def test_remap_indices_rewrites_only_mapped_columns_and_keeps_type(spark):
    schema = T.StructType([T.StructField("State", T.IntegerType()), T.StructField("Promo", T.IntegerType())])
    df = spark.createDataFrame([(0, 1), (1, 2), (2, 0), (3, 1), (9, 2)], schema)
    out = remap_indices(df, {"State": {0: 0, 1: 2, 2: 0, 3: 1}})
    assert [f.dataType for f in out.schema] == [f.dataType for f in schema]
    assert [tuple(r) for r in out.collect()] == [(0, 1), (2, 2), (0, 0), (1, 1), (0, 2)]


def test_open_status_classifies_closed_open_blank_and_invalid(spark):
    df = spark.createDataFrame([(1, 0), (2, 1), (3, None), (4, 2)], "Id int, Open int")
    status = {r["Id"]: r[OPEN_STATUS_COL] for r in with_open_status(df).collect()}
    assert status == {1: "closed", 2: "open", 3: "open_blank", 4: "invalid"}


def test_rmspe_matches_numpy_and_ignores_zero_actuals(spark):
    actual = [100.0, 250.0, 80.0, 0.0]
    forecast = [110.0, 200.0, 100.0, 5.0]
    df = spark.createDataFrame(list(zip(actual, forecast)), "SalesActual double, SalesForecast double")
    y, y_hat = np.array(actual[:3]), np.array(forecast[:3])
    assert metrics.overall_rmspe(df) == pytest.approx(math.sqrt(np.mean(((y - y_hat) / y) ** 2)))


def test_submission_ids_must_match_test_ids_exactly():
    test_ids = pd.Series(range(1, 6), dtype="int32")
    check_submission_ids(test_ids, pd.Series([5, 4, 3, 2, 1]))
    broken = pd.Series([1, 2, 2, 3, 7])
    with pytest.raises(SubmissionCheckError) as error:
        check_submission_ids(test_ids, broken)
    message = str(error.value)
    assert "2 Id(s) missing, e.g. [4, 5]" in message
    assert "1 Id(s) not in the test set, e.g. [7]" in message
    assert "1 Id(s) duplicated, e.g. [2]" in message


def test_raw_test_ids_must_all_be_prepared_and_nothing_else():
    """An unparseable or quarantined raw Id is named by its raw text (unparseable first); a prepared Id the raw
    file lacks means another drop."""
    from rossmann_jobs.forecast.prepared_checks import ForecastInputError
    from rossmann_jobs.forecast.submission import check_raw_test_ids, check_unique_test_ids

    raw = pd.DataFrame({"RawId": ["1", "2", " 3", "x4", "5"], "Id": [1.0, 2.0, 3.0, float("nan"), 5.0]})
    check_raw_test_ids(raw.drop(index=3), pd.Series([1, 2, 3, 5], dtype="int32"), "raw", "test", "rej")
    with pytest.raises(ForecastInputError, match=r"raw: 2 Id\(s\) are not in the prepared test split test, "
                                                 r"e\.g\. Ids \['x4', '5'\]"):
        check_raw_test_ids(raw, pd.Series([1, 2, 3], dtype="int32"), "raw", "test", "rej")
    with pytest.raises(ForecastInputError, match=r"test: 1 Id\(s\) are not in raw, e\.g\. Ids \[9\]"):
        check_raw_test_ids(raw.drop(index=3), pd.Series([1, 2, 3, 5, 9]), "raw", "test", "rej")
    check_unique_test_ids(pd.Series([3, 1, 2]), "test")
    with pytest.raises(ForecastInputError, match=r"test: column Id has 1 duplicated value\(s\), e\.g\. Ids \[2\]"):
        check_unique_test_ids(pd.Series([3, 2, 1, 2]), "test")


def test_accounting_rejects_lost_or_extra_rows():
    check_accounting(10, 7, 3)
    with pytest.raises(SubmissionCheckError, match="6 forecast \\+ 3 closed != 10 test rows"):
        check_accounting(10, 6, 3)


def test_csv_has_exactly_id_and_sales_sorted_by_id():
    frame = pd.DataFrame({"Sales": [0.0, 12.346, 7.0], "Id": [3, 1, 2], "Extra": ["x", "y", "z"]})
    assert csv_bytes(frame).decode().splitlines() == ["Id,Sales", "1,12.35", "2,7.00", "3,0.00"]


def test_check_values_names_file_column_and_example_rows(spark):
    rows = [(1, date(2015, 8, 1), 0), (2, date(2015, 8, 1), 3), (3, date(2015, 8, 2), 5)]
    df = spark.createDataFrame(rows, "StoreId int, Date date, Promo int")
    assert check_values(df, "s3://b/test", {"Promo": 6}, ["StoreId"]) == 3
    with pytest.raises(ForecastInputError) as error:
        check_values(df, "s3://b/test", {"Promo": 3}, ["StoreId"])
    assert "s3://b/test: column Promo has 2 index(es) outside 0..2" in str(error.value)
    assert "'StoreId': 3" in str(error.value)


def test_pick_stores_spreads_over_sales_range():
    totals = pd.DataFrame({"StoreId": range(1, 11), "SalesActual": [float(v) for v in range(100, 0, -10)]})
    assert forecast_page.pick_stores(totals, count=4) == [1, 4, 7, 10]
    assert forecast_page.pick_stores(totals.head(3), count=4) == [1, 2, 3]


def _page_images(page: str) -> list[bytes]:
    parser = ReportPage()
    parser.feed(page)
    assert all(src.startswith("data:image/png;base64,") for src in parser.sources), "every image is embedded"
    return [base64.b64decode(src.split(",", 1)[1]) for src in parser.sources]


def _scored(as_of: str, scoring_date: str, model: float) -> dict:
    return {"as_of": as_of, "run_id": f"run_{as_of}", "status": "scored", "scoring_date": scoring_date,
            "days_scored": 3, "rows": 30, "model_exp_rmspe": model, "baseline_exp_rmspe": 0.2}


def test_the_report_is_one_self_contained_page_with_gate_curves_and_accuracy():
    days = pd.date_range("2014-08-01", periods=5).date
    daily = pd.DataFrame({"Date": days, "SalesActual": [5.0, 6, 7, 6, 5], "SalesForecast": [5.5, 6, 6, 6, 4]})
    by_store = pd.concat([daily.assign(StoreId=s) for s in (3, 7, 9)])
    horizon = pd.DataFrame({"Date": days, "SalesForecast": [9.0, 0, 8, 7, 9], "OpenStores": [3, 0, 3, 3, 2]})
    ahead = pd.DataFrame({"Date": pd.date_range("2014-08-06", periods=3).date, "P50": [6.0, 6.5, 7.0],
                          "SalesBaseline": [5.0, 5.5, 6.0]})
    fan = pd.concat([ahead.assign(StoreId=s, P10=ahead["P50"] * 0.9, P90=ahead["P50"] * 1.2) for s in (3, 7)])
    last_year = fan[["StoreId", "Date"]].assign(SalesLastYear=5.8).head(4)
    fan_plot = ("Forecast horizon: P10-P90 fan", forecast_page.fan_chart(by_store, fan, "P10", "P50", "P90",
                                                                        last_year=last_year), "<p>fan note</p>")
    plots = [("horizon", forecast_page.horizon_plot(horizon)), ("overall", forecast_page.overall_plot(daily, 0.12)),
             ("stores", forecast_page.stores_plot(by_store, {3: 0.1}))]
    worst = pd.DataFrame({"StoreId": [7], "rmspe": [0.3]})
    metrics_rows = [("validation exp-RMSPE", 0.1234), ("horizon", {"start": "2015-08-01", "end": "2015-09-17"}),
                    ("validation window", ["2014-08-02", "2014-09-17"])]
    history = [{"epoch": e, "train_loss": 1 / e, "val_loss": 1.1 / e, "train_exp_rmspe": 0.5 / e,
                "val_exp_rmspe": 0.6 / e} for e in (1, 2, 3)]
    training = {"epochs": history, "best_epoch": 3,
                "gate_scores": {"challenger": 0.1511, "champion": 0.1622, "baseline": 0.1733, "validation_rows": 480,
                                "champion_model_uri": "s3://b/models/champions/x"}}
    accuracy = [_scored("2015-07-20", "2015-07-30", 0.1844), _scored("2015-07-25", "2015-07-30", 0.1955)]

    full = forecast_page.forecast_page("t<1>", metrics_rows, fan_plot, plots, worst, [("artifact: x", "<b>")],
                                       training, "s3://b/run/model/a1/metrics.json", "promoted <beats both>", accuracy)
    images = _page_images(full)
    # gate comparison, training curves, the 3 validation/horizon plots, the fan chart, accuracy over time
    assert len(images) == 7 and all(png.startswith(PNG_SIGNATURE) and len(png) > 1000 for png in images)
    for text in ("0.1234", "&lt;b&gt;", "Store 7", "start: 2015-08-01, end: 2015-09-17", "2014-08-02 to 2014-09-17",
                 "0.1511", "0.1622", "0.1733", "s3://b/models/champions/x", "promoted &lt;beats both&gt;",
                 "Training curves", "run_2015-07-20", "0.1955"):
        assert text in full, text
    assert "src=\"validation" not in full and ".png\"" not in full, "no image is referenced by path"

    # What the reader wants first: the horizon's fan, the gate's verdict, the run's facts, then the rest.
    headings = re.findall(r"<h2>(.*?)</h2>", full)
    assert headings[:4] == ["Forecast horizon: P10-P90 fan", "Model selection (quality gate)", "Run metrics",
                            "horizon"], headings
    assert full.index("promoted &lt;beats both&gt;") < full.index("0.1511") and "fan note" in full

    bare = forecast_page.forecast_page("t", metrics_rows, fan_plot, plots, worst, [], None, "s3://b/m/metrics.json",
                                       None, [])
    assert len(_page_images(bare)) == 4
    assert "holds no gate scores" in bare and "No earlier forecast has been scored" in bare
    assert "Training curves" not in bare


def test_the_report_embeds_the_train_jobs_own_curves_instead_of_drawing_them(tmp_path):
    """The training curves the train job drew (training_curves.png beside its metrics.json) are reused as they are."""
    from rossmann_jobs.reporting.forecast_report import read_report_context
    from rossmann_jobs.reporting.training_curves import training_curves_png

    history = [{"epoch": e, "train_loss": 1 / e, "val_loss": 1.1 / e, "train_exp_rmspe": 0.5 / e,
                "val_exp_rmspe": 0.6 / e} for e in (1, 2)]
    drawn = training_curves_png(history, 2)
    attempt = tmp_path / "model" / "attempts" / "a"
    attempt.mkdir(parents=True)
    (attempt / "training_curves.png").write_bytes(drawn)
    training = {"epochs": history, "best_epoch": 2}
    context = read_report_context("", "", date(2015, 7, 31), training, str(attempt))
    assert context["training_curves"] == drawn
    page = forecast_page.forecast_page("t", [], None, [], pd.DataFrame({"StoreId": [], "rmspe": []}), [],
                                       **context, gate_decision=None)
    assert _page_images(page) == [drawn]


def test_the_fan_chart_shows_last_years_same_weekdays_from_the_history_or_says_there_are_none(spark):
    """Last year's same weeks: a horizon day's actual sales 364 days earlier (the same weekday), from the prepared
    history's log(Sales); a day without such a row has none, and the note says when none was found."""
    from rossmann_jobs.reporting.forecast_report import fan_note, last_year_actuals

    day = date(2015, 8, 3)
    history = spark.createDataFrame([(3, day - timedelta(days=364), math.log(1234.0)),
                                     (3, day - timedelta(days=365), math.log(99.0))],
                                    "StoreId int, Date date, Sales float")
    horizon = spark.createDataFrame([(3, day), (3, day + timedelta(days=1)), (7, day)], "StoreId int, Date date")
    got = last_year_actuals(history, horizon).toPandas()
    assert got[["StoreId", "Date"]].values.tolist() == [[3, day]]
    assert got["SalesLastYear"].tolist() == pytest.approx([1234.0], rel=1e-6)
    assert last_year_actuals(None, horizon) is None
    assert "found for 1 of the 3 store-days" in fan_note(("P10", "P50", "P90"), 1, 3)
    assert "none found" in fan_note(("P10", "P50", "P90"), 0, 3)


def test_the_report_shows_only_scores_known_by_its_as_of_date():
    """A backfill's report (as of D) must not show accuracy measured with actuals that arrived after D."""
    from rossmann_jobs.past_forecasts.records import scored_as_of

    summary = {"forecasts": {"a": _scored("2015-07-20", "2015-07-30", 0.1),
                             "b": _scored("2015-07-10", "2015-07-12", 0.2),
                             "c": _scored("2015-07-25", "2015-08-02", 0.3),
                             "d": {**_scored("2015-07-29", "2015-07-30", 0.4), "status": "pending"}}}
    assert [e["as_of"] for e in scored_as_of(summary, date(2015, 7, 31))] == ["2015-07-10", "2015-07-20"]
    assert [e["as_of"] for e in scored_as_of(summary, date(2015, 8, 2))] == ["2015-07-10", "2015-07-20", "2015-07-25"]
    assert scored_as_of(None, date(2015, 8, 2)) == []


@pytest.fixture(scope="module")
def tiny_model():
    return predict_fixtures.build_model(predict_fixtures.vocabularies())


def _model_content(model) -> tuple[dict, bytes]:
    return predict_fixtures.model_artifact(predict_fixtures.vocabularies()), model_files.weights_bytes(model)


def test_model_loaded_once_per_process_and_batches_predicted_like_keras(tiny_model, tmp_path):
    test, _ = predict_fixtures.make_frames()
    content = _model_content(tiny_model)
    fetches = []

    def fetch() -> tuple[dict, bytes]:
        fetches.append(1)
        return content

    uri = f"file://{tmp_path}/model#once"
    run = forecast_batches(uri, fetch, ["Id"])
    batches = [test.iloc[:10], test.iloc[10:11], test.iloc[11:]]
    out = pd.concat(list(run(iter(batches))))
    out_again = pd.concat(list(forecast_batches(uri, fetch, ["Id"])(iter([test]))))
    assert len(fetches) == 1 and uri in model_cache._MODELS
    expected = tiny_model.predict({c: test[c].to_numpy().reshape(-1, 1) for c in FEATURE_COLS}, verbose=0)
    np.testing.assert_allclose(out["LogSalesForecast"].to_numpy(), expected.reshape(-1), rtol=1e-5)
    np.testing.assert_array_equal(out["Id"].to_numpy(), test["Id"].to_numpy())
    np.testing.assert_allclose(out_again["LogSalesForecast"], out["LogSalesForecast"], rtol=1e-6)
    assert predict_log_sales(test.head(0), tiny_model).shape == (0,)


def test_weights_of_another_network_are_rejected(tmp_path):
    import tensorflow as tf

    inputs = [tf.keras.layers.Input(shape=(1,), name=c) for c in CATEGORICAL_COLS]
    wrong = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(tf.keras.layers.Concatenate()(inputs)))
    content = _model_content(wrong)
    with pytest.raises(IncompatibleModelError, match="its weights name layers .* the model built from its artifact"):
        model_cache.load_model(f"file://{tmp_path}/wrong", lambda: content)


# Quantile forecasts (rossmann_jobs/forecast/quantiles.py)

def test_sparse_lead_weeks_are_pooled_with_their_neighbours():
    from rossmann_jobs.forecast.quantiles import pooled_weeks

    counts = {1: 40, 2: 10, 3: 25, 4: 40, 5: 40, 6: 40, 7: 5}
    assert pooled_weeks(counts, min_rows=30) == {1: (1, 1), 2: (1, 3), 3: (2, 4), 4: (4, 4), 5: (5, 5),
                                                 6: (6, 6), 7: (6, 7)}
    assert pooled_weeks({1: 3}, min_rows=30)[4] == (1, 7)     # too few rows anywhere: every week pooled


def test_quantiles_never_cross():
    from rossmann_jobs.forecast.quantiles import non_crossing, quantile_table

    assert non_crossing([-0.2, -0.3, 0.1]) == [-0.2, -0.2, 0.1]
    table = quantile_table({1: [-0.1, 0.0, 0.2], 2: [0.3, 0.1, 0.2]}, (0.1, 0.5, 0.9))
    assert table[2] == [0.3, 0.3, 0.3] and table[7] == [0.0, 0.0, 0.0]
    assert all(values == sorted(values) for values in table.values())


def test_residual_quantiles_per_lead_week_on_a_hand_made_case(spark):
    """Week 1 has its own 40 residuals, week 2 only 5: it is calibrated on weeks 1-3 (85 rows), each week's rows
    placed at every week's median in turn."""
    from rossmann_jobs.forecast.quantiles import (
        LEAD_WEEK_COL,
        RESIDUAL_COL,
        pooled_weeks,
        residual_quantiles,
        validation_residuals,
    )

    rng = np.random.default_rng(5)
    weeks = [1] * 40 + [2] * 5 + [3] * 40
    actual = rng.uniform(100, 1000, size=len(weeks))
    log_forecast = np.log(actual) - rng.normal(0, [0.05 * w for w in weeks])
    frame = spark.createDataFrame(
        [(w, float(a), float(f)) for w, a, f in zip(weeks, actual, log_forecast)] + [(1, 0.0, 1.0)],
        "LeadWeek int, SalesActual double, LogSalesForecast double")
    residuals = validation_residuals(frame, "SalesActual", "LogSalesForecast")
    assert residuals.count() == len(weeks)       # the row without sales has no residual
    counts = {1: 40, 2: 5, 3: 40}
    levels = (0.1, 0.5, 0.9)
    spans = pooled_weeks(counts, weeks=3)
    assert spans == {1: (1, 1), 2: (1, 3), 3: (3, 3)}
    got = {r[LEAD_WEEK_COL]: r["_q"] for r in residual_quantiles(residuals, spans, levels).collect()}
    residual, weeks = np.log(actual) - log_forecast, np.array(weeks)
    pooled = {week: residual[(weeks >= first) & (weeks <= last)] for week, (first, last) in spans.items()}
    median = {week: np.median(values) for week, values in pooled.items()}
    for week, values in pooled.items():
        mixture = np.concatenate([values + median[other] - median[week] for other in pooled])
        assert got[week] == pytest.approx(np.percentile(mixture, [10, 50, 90])), week
    assert RESIDUAL_COL in residuals.columns


def test_each_weeks_spread_is_placed_at_every_weeks_median_on_a_hand_made_case(spark):
    """Two weeks of 40 residuals, week 2's 0.3 higher: each week's quantiles are those of its own rows and of its
    rows moved by the other week's shock, so both weeks' intervals widen by the shock and keep their own spread."""
    from rossmann_jobs.forecast.quantiles import LEAD_WEEK_COL, RESIDUAL_COL, residual_quantiles

    rng = np.random.default_rng(11)
    own = {1: rng.normal(0.0, 0.05, 40), 2: rng.normal(0.3, 0.1, 40)}
    residuals = spark.createDataFrame([(week, float(value)) for week, values in own.items() for value in values],
                                      f"{LEAD_WEEK_COL} int, {RESIDUAL_COL} double")
    levels = (0.1, 0.5, 0.9)
    rows = {r[LEAD_WEEK_COL]: r for r in residual_quantiles(residuals, {1: (1, 1), 2: (2, 2)}, levels).collect()}
    median = {week: np.median(values) for week, values in own.items()}
    for week, other in ((1, 2), (2, 1)):
        mixture = np.concatenate([own[week], own[week] + median[other] - median[week]])
        assert rows[week]["_q"] == pytest.approx(np.percentile(mixture, [10, 50, 90]))
        assert rows[week]["_median"] == pytest.approx(np.median(mixture))
        plain = np.percentile(own[week], [10, 90])
        assert rows[week]["_q"][2] - rows[week]["_q"][0] > plain[1] - plain[0] + 0.1   # wider by the shock


def test_each_lead_weeks_quantiles_are_centred_on_the_point_forecast():
    """A week's own median (one window's common shock) is taken out: the spread stays, the order too, and the
    median level sits on the point forecast (0); a week without residuals is left as it is."""
    from rossmann_jobs.forecast.quantiles import centred_table

    table = {1: [-0.2, 0.05, 0.3], 2: [-0.1, -0.08, 0.0], 3: [0.0, 0.0, 0.0]}
    got = centred_table(table, {1: 0.05, 2: -0.08})
    assert got[1] == pytest.approx([-0.25, 0.0, 0.25]) and got[2] == pytest.approx([-0.02, 0.0, 0.08])
    assert got[3] == [0.0, 0.0, 0.0]
    assert all(values == sorted(values) for values in got.values())


def seed_week_saturday(day: date) -> date:
    """The Saturday ending the trend week a row dated day carries (the Sunday after the day's ISO week, + 6)."""
    return day + timedelta(days=6 - day.weekday() + 6)


def test_validation_rows_get_the_trend_their_origin_knew(spark):
    """A validation row dated 2015-07-20 with lead 40 is forecast from 2015-06-10 (a Wednesday): it gets, per
    state, the trend of the week that ended on the Saturday before, 2015-06-06, as a horizon row gets the last week
    ended by D; a row whose origin's week no history row carries keeps its own trend."""
    from rossmann_jobs.forecast.quantiles import trend_at_origin

    days = [date(2015, 4, 1) + timedelta(days=i) for i in range(122)]
    code = {day: int(seed_week_saturday(day).strftime("%j")) for day in days}   # the week's Saturday, as a number
    history = spark.createDataFrame([(state, day, float(code[day] + 100 * state), float(code[day] + 1000))
                                     for state in (1, 2) for day in days],
                                    "State int, Date date, trend double, trend_de double")
    rows = spark.createDataFrame([(1, 1, date(2015, 7, 20), 40.0, -1.0, -1.0),
                                  (2, 2, date(2015, 7, 20), 40.0, -1.0, -1.0),
                                  (3, 1, date(2015, 7, 25), 5.0, -1.0, -1.0),      # origin Monday 2015-07-20
                                  (4, 1, date(2015, 4, 2), 1.0, -1.0, -1.0)],      # origin's week not in history
                                 "Id int, State int, Date date, LeadDays double, trend double, trend_de double")
    out = trend_at_origin(rows, history, "LeadDays").orderBy("Id").toPandas()
    june6, july18 = int(date(2015, 6, 6).strftime("%j")), int(date(2015, 7, 18).strftime("%j"))
    assert out["trend"].tolist() == [june6 + 100, june6 + 200, july18 + 100, -1.0]
    assert out["trend_de"].tolist() == [june6 + 1000, june6 + 1000, july18 + 1000, -1.0]
    assert list(out.columns) == rows.columns


def test_a_validation_rows_trend_from_its_origin_is_moved_by_the_season(spark):
    """Each earlier summer the trend rose 2 % a week: a row dated 2015-07-20 with lead 40 (origin 2015-06-10, last
    week ended 06-06) carries its own week's value (that of the week starting 07-26) from the origin's week times
    exp(7 x 0.02), as prepare moves D's last week to a horizon day. Without the earlier years, persistence."""
    from rossmann_jobs.forecast.quantiles import trend_at_origin

    def weekly(day: date, level: float) -> float:
        sunday = seed_week_saturday(day) - timedelta(days=6)
        return level * math.exp(0.02 * (sunday - date(sunday.year, 6, 1)).days / 7)

    days = [date(2013, 5, 1) + timedelta(days=i) for i in range((date(2015, 7, 31) - date(2013, 5, 1)).days + 1)]
    history = spark.createDataFrame([(1, day, weekly(day, 60.0 if day.year < 2015 else 80.0), weekly(day, 40.0))
                                     for day in days], "State int, Date date, trend double, trend_de double")
    rows = spark.createDataFrame([(1, 1, date(2015, 7, 20), 40.0, -1.0, -1.0)],
                                 "Id int, State int, Date date, LeadDays double, trend double, trend_de double")
    origin_week = date(2015, 5, 31)   # Sunday .. Saturday 06-06
    out = trend_at_origin(rows, history, "LeadDays").toPandas()
    seven_weeks = math.exp(0.02 * (date(2015, 7, 26) - origin_week).days / 7)
    assert out["trend"][0] == pytest.approx(weekly(origin_week, 80.0) * seven_weeks, rel=1e-9)
    assert out["trend_de"][0] == pytest.approx(weekly(origin_week, 40.0) * seven_weeks, rel=1e-9)
    this_year = trend_at_origin(rows, history.filter(history["Date"] >= date(2015, 1, 1)), "LeadDays").toPandas()
    assert this_year["trend"][0] == pytest.approx(weekly(origin_week, 80.0), rel=1e-9)


def test_the_trends_drift_widens_the_residuals_in_both_directions(spark):
    """With the origin's forecast, each residual enters twice, minus and plus the drift: week 2's quantiles, whose
    rows drift by 0.1, span 0.2 more than week 1's, without drift; the median stays."""
    from rossmann_jobs.forecast.quantiles import LEAD_WEEK_COL, RESIDUAL_COL, validation_residuals

    residual = np.linspace(-0.1, 0.1, 41)
    frame = spark.createDataFrame(
        [(week, float(math.exp(8 + r)), 8.0, 8.0 + 0.1 * (week - 1)) for week in (1, 2) for r in residual],
        "LeadWeek int, SalesActual double, LogSalesForecast double, LogSalesForecastFromOrigin double")
    plain = validation_residuals(frame, "SalesActual", "LogSalesForecast").toPandas()
    both = validation_residuals(frame, "SalesActual", "LogSalesForecast", "LogSalesForecastFromOrigin").toPandas()
    assert len(plain) == 82 and len(both) == 164
    spread = {week: np.percentile(both[both[LEAD_WEEK_COL] == week][RESIDUAL_COL], [0, 50, 100]) for week in (1, 2)}
    assert spread[1] == pytest.approx([-0.1, 0.0, 0.1], abs=1e-9)
    assert spread[2] == pytest.approx([-0.2, 0.0, 0.2], abs=1e-9)


def test_quantile_forecasts_scale_the_forecast_monotone_and_closed_days_are_zero(spark):
    from rossmann_jobs.forecast.quantiles import lead_week, quantiles_csv_bytes, with_quantiles

    table = {week: [-0.2 * week, 0.0, 0.1 * week] for week in range(1, 8)}
    rows = spark.createDataFrame([(3, 1, date(2015, 8, 2), 100.0, 1), (1, 2, date(2015, 8, 9), 200.0, 9),
                                  (2, 1, date(2015, 9, 30), 0.0, 60)],
                                 "Id int, StoreId int, Date date, SalesForecast double, lead int")
    out = with_quantiles(rows.withColumn("LeadWeek", lead_week(rows["lead"])), table, (0.1, 0.5, 0.9),
                         "SalesForecast").orderBy("Id").toPandas()
    assert out["LeadWeek"].tolist() == [2, 7, 1]       # lead 9 -> week 2, 60 (past the 48 days) -> 7, 1 -> 1
    assert out.loc[2, ["SalesP10", "SalesP50", "SalesP90"]].tolist() == pytest.approx(
        [100 * math.exp(-0.2), 100.0, 100 * math.exp(0.1)])
    assert out.loc[0, ["SalesP10", "SalesP50", "SalesP90"]].tolist() == pytest.approx(
        [200 * math.exp(-0.4), 200.0, 200 * math.exp(0.2)])
    assert out.loc[1, ["SalesP10", "SalesP50", "SalesP90"]].tolist() == [0.0, 0.0, 0.0]
    values = out[["SalesP10", "SalesP50", "SalesP90"]].to_numpy()
    assert (np.diff(values, axis=1) >= 0).all()
    text = quantiles_csv_bytes(out, (0.1, 0.5, 0.9)).decode()
    assert text.splitlines() == ["Id,Date,Store,P10,P50,P90", "1,2015-08-09,2,134.06,200.00,244.28",
                                 "2,2015-09-30,1,0.00,0.00,0.00", "3,2015-08-02,1,81.87,100.00,110.52"]


def test_baseline_quantiles_are_the_cells_empirical_quantiles_with_the_baselines_fallback(spark):
    from rossmann_jobs.forecast.baseline import BASELINE_COL, baseline_forecast

    end = date(2015, 7, 31)
    sales = [100.0, 200.0, 300.0, 400.0, 500.0]
    history = spark.createDataFrame(
        [(1, end - timedelta(days=7 * i), 5, 1, float(np.log(s))) for i, s in enumerate(sales)]
        + [(1, end - timedelta(days=400), 5, 1, float(np.log(9999.0)))],       # before the 365-day window
        "StoreId int, Date date, DayOfWeek int, Promo int, Sales float")
    rows = spark.createDataFrame([(1, 1, 5, 1), (2, 1, 3, 0)], "Id int, StoreId int, DayOfWeek int, Promo int")
    out = (baseline_forecast(rows, history, end, levels=(0.1, 0.5, 0.9), columns=["B10", "B50", "B90"])
           .orderBy("Id").toPandas())
    expected = np.exp(np.percentile(np.log(np.array(sales, dtype=np.float32)), [10, 50, 90]))
    assert out.loc[0, ["B10", "B50", "B90"]].tolist() == pytest.approx(expected, rel=1e-5)
    # store 1 has no history for weekday 3 without promo, nor without promo at all: the store's cell
    assert out.loc[1, ["B10", "B50", "B90"]].tolist() == pytest.approx(expected, rel=1e-5)
    # the point baseline is the same cell's median, from the same pass
    assert out[BASELINE_COL].tolist() == pytest.approx([300.0, 300.0], rel=1e-5)


def test_baseline_is_the_most_specific_cells_median_and_quantiles_as_pandas_computes_them(spark):
    """Every level of the fallback, on random history with gaps, against a plain pandas reading of the rule."""
    from rossmann_jobs.forecast.baseline import BASELINE_COL, LEVELS, baseline_forecast

    rng = np.random.default_rng(4)
    end = date(2015, 7, 31)
    history = pd.DataFrame({"StoreId": rng.integers(1, 5, 400), "DayOfWeek": rng.integers(1, 4, 400),
                            "Promo": rng.integers(0, 2, 400), "Sales": rng.normal(8, 0.5, 400).astype(np.float32),
                            "Date": [end - timedelta(days=int(d)) for d in rng.integers(0, 500, 400)]})
    # store 3 never has promo 1 with weekday 3, store 4 never promo 1: two fallbacks; store 9 has no history.
    history = history[~((history.StoreId == 3) & (history.DayOfWeek == 3) & (history.Promo == 1))
                      & ~((history.StoreId == 4) & (history.Promo == 1))]
    rows = pd.DataFrame([(i, s, d, p) for i, (s, d, p) in enumerate(
        [(s, d, p) for s in (1, 2, 3, 4, 9) for d in (1, 2, 3) for p in (0, 1)])],
        columns=["Id", "StoreId", "DayOfWeek", "Promo"])
    out = (baseline_forecast(spark.createDataFrame(rows), spark.createDataFrame(history), end,
                             levels=(0.1, 0.9), columns=["B10", "B90"]).orderBy("Id").toPandas())
    window = history[history.Date > end - timedelta(days=365)]
    for row in rows.itertuples():
        for keys in LEVELS:
            mask = np.ones(len(window), dtype=bool)
            for key in keys:
                mask &= window[key].to_numpy() == getattr(row, key)
            cell = window[mask]
            if len(cell):
                break
        expected = np.exp(np.percentile(cell["Sales"].astype(np.float64), [50, 10, 90]))
        got = out.loc[row.Id, [BASELINE_COL, "B10", "B90"]].to_numpy(dtype=float)
        np.testing.assert_allclose(got, expected, rtol=1e-5, err_msg=f"row {row} (cell keys {keys})")
