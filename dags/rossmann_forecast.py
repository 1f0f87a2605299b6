"""
### Rossmann store-sales forecast: daily retrain and forecast

`plan_run` → `wait_for_raw_drop` → `prepare_features` → `find_champion` → `train_model` → `backtest_season`
→ `read_train_metrics` → `quality_gate` → `predict` → `publish_forecast`

* **Data arrival**: the day's raw drop lands under `s3://<bucket>/raw/<as_of>/` (the 7 Rossmann CSV files, then a
  `_SUCCESS` marker written last). The sensor waits for the marker on the triggerer (deferrable, where
  `[operators] default_deferrable` is on; else in reschedule mode), holding no worker slot, and fails with an
  actionable message after `raw_drop_timeout_s`.
* **Point in time**: the prepare job gets `--as-of <as_of>` (the run's logical date `ds`, or the `as_of` param),
  so a backfill for a past date trains only on rows dated on or before it.
* **Jobs**: three `spark-submit`s (prepare, train with Horovod-on-Spark, predict). Every job output is
  run-scoped (`s3://<bucket>/runs/<as_of>/<run key>/…`; the run key: uris.run_key) and committed atomically with a
  `_SUCCESS` manifest; tasks pass only these URIs through XCom.
* **Quality gate (backfill = backtest)**: champions are kept per as-of date
  (`s3://<bucket>/models/champions/history/<as_of>.json`); the *champion as of D* is the record with the greatest
  as-of date ≤ D, so a model trained on later data never forecasts an earlier date. `find_champion` hands it to the
  train job (`--champion-model`; with the `warm_start` param also `--warm-start-model`: the new model starts from
  the champion's weights and fine-tunes for `warm_start_epochs`), which scores the new model, that champion
  (vocabularies re-mapped) and a naive seasonal baseline (median Sales per store × weekday × promo) on the same
  validation rows. The new model is promoted when it beats the baseline and there is no champion as of D or its
  exp_rmspe ≤ champion's × (1 + `promotion_tolerance`); a re-run of the champion's own run must be strictly better.
  Otherwise the champion as of D forecasts.
* **Season backtest**: the validation window (the 48 days up to D) never holds the horizon's season, so
  `backtest_season` replays the recipe a year earlier: the same training params, cold, on the prepared rows up to
  D - 364 - 48, its epoch chosen on the 48 days up to D - 364, scored with the naive baseline fitted up to D - 364 on
  D - 364 .. D - 316 (rows neither saw). Where the network loses to naive there (× (1 + `season_tolerance`)), no
  network forecasts the date: not the challenger, not the champion.
* **Always a forecast**: when no model may forecast (the season backtest refuses the network, or the challenger is
  not promoted and there is no champion as of D), the naive seasonal baseline is the day's forecast, with quantiles
  from its own validation residuals: published, registered and scored like any other, marked `forecast_model:
  naive-seasonal` with its `fallback_reason` in `latest.json`, the registry and the report, and alerted (one
  "forecast fallback" message to `rossmann_alerts`). The champion is
  an immutable copy of the committed model attempt, its record holds the SHA-256 of its model files, and the jobs
  load a model only from `models/` or `runs/` and only as recorded; `models/champion.json` points at the newest
  as-of date's champion. A model is data (the params it is built from + its weights), never a Keras model file.
* **Report**: predict's committed `report/index.html` is one self-contained page (gate comparison, training curves,
  validation and horizon plots, accuracy history known by the as-of date); the predict task's "Forecast report"
  extra link holds a presigned URL of it (no log or XCom value does: the URL is a bearer credential).
* **Output**: `publish_forecast` copies the committed forecast to `forecast/published/` (immutable, hashed) and
  writes `s3://<bucket>/forecast/latest.json` (pointing at the copy's `submission.csv` and report) unless it holds
  a newer as-of date's forecast (a backfill never hides it) or a later decision for the date, and updates the
  `rossmann_forecast` asset for data-aware downstream DAGs (extra `latest`: whether the pointer holds this run's).
  Every published forecast (backfills too) is registered at `s3://<bucket>/forecast/history/<as_of>/<run>.json`.
* **Scoring** (after the drop, beside the forecast branch): the drop for D holds the actual sales up to D, so
  `find_forecasts_to_score` lists the registered forecasts as of dates before D whose horizon has started (skipping
  those already scored through their horizon's end), `score_forecasts` (spark-submit) scores them and the naive
  seasonal baseline on the same rows (exp-RMSPE and median forecast/actual ratio overall, per lead day and week, per
  store, and over the last 14 days up to D) into `s3://<bucket>/forecast/scores/` (records, `summary.json`,
  `report/index.html`), and `publish_scores` updates the `rossmann_forecast_scores` asset. With nothing to score the
  two scoring tasks are skipped. Re-runs rewrite the same objects.
* **Bias in production**: `publish_scores` posts one "forecast drift" alert to `rossmann_alerts` when, over the last
  14 days up to D, the model's median forecast/actual ratio is off 1 by more than `bias_alert_threshold` or its
  exp-RMSPE is worse than the naive baseline's; the task still succeeds (XCom `alert` says what was checked).

A second DAG, `rossmann_forecast_deadline`, alerts when the forecast is not published by the deadline.

Connections: `spark_default` (master; extra `spark_conf` for every job's Spark settings, `job_conf` for one job's,
e.g. `{"prepare": {"spark.driver.memory": "6g"}}`; defaults in rossmann/spark_submit.py) and `aws_default`
(credentials, extra `endpoint_url` for MinIO/moto; the Spark jobs use the connection named by
`ROSSMANN_JOBS_AWS_CONN_ID` when set, e.g. compose's least-privilege `aws_jobs`). Bucket: environment variable
`ROSSMANN_BUCKET` (default `rossmann`). Job code location: Variables `rossmann_jobs_root` and
`rossmann_py_files` (defaults: the installed rossmann_jobs package's folder, none).
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.sdk import Asset, CronDataIntervalTimetable, Param, dag, task

from rossmann.alerts import task_failure_alert
from rossmann.pools import SPARK_POOL
from rossmann.sensors import RawDropSensor
from rossmann.spark_submit import (
    PredictSubmitOperator,
    RossmannSparkSubmitOperator,
    default_jobs_root,
    jobs_aws_conn_id,
)
from rossmann.uris import forecast_pointer_uri, scores_summary_uri
from rossmann_jobs.features.drop_settings import (
    ALLOW_UNVERIFIED_DROP,
    DEFAULT_MAX_STALENESS_DAYS,
    MAX_STALENESS_DAYS_LIMIT,
)
from rossmann_jobs.past_forecasts.records import BIAS_ALERT_THRESHOLD

FORECAST_ASSET = Asset(name="rossmann_forecast", uri=forecast_pointer_uri())
SCORES_ASSET = Asset(name="rossmann_forecast_scores", uri=scores_summary_uri())
JOBS_ROOT = "{{ var.value.get('rossmann_jobs_root', '%s') }}" % default_jobs_root()
PY_FILES = "{{ var.value.get('rossmann_py_files', '') }}"

PARAMS = {
    "as_of": Param(None, type=["null", "string"], format="date", title="As-of date",
                   description="Data cut-off (YYYY-MM-DD). Empty: the run's logical date."),
    "sample_rate": Param(1.0, type="number", exclusiveMinimum=0, maximum=1, title="Sample rate",
                         description="Fraction of training rows the prepare job keeps."),
    "seed": Param(42, type="integer", minimum=0, title="Sampling seed"),
    "validation_window": Param("recent", type="string", enum=["recent", "year-earlier"], title="Validation window",
                               description="The rows that stop training, pick the best epoch and feed the quality "
                                           "gate. recent: the last 48 days up to the as-of date, scored from an "
                                           "origin before them like the forecast (out of time). year-earlier: the "
                                           "horizon a year back (Horovod's example), inside the training period."),
    "epochs": Param(12, type="integer", minimum=1, maximum=1000, title="Epochs",
                    description="Epochs of a cold start (early stopping on validation exp_rmspe may end it sooner)."),
    "num_proc": Param(2, type="integer", minimum=1, maximum=1024, title="Horovod processes"),
    "batch_size": Param(512, type="integer", minimum=1, maximum=1_000_000, title="Batch size per process"),
    "learning_rate": Param(1e-3, type="number", exclusiveMinimum=0, maximum=1, title="Base learning rate",
                           description="Per process; warmed up to rate x Horovod processes inside the train job."),
    "lr_schedule": Param("cosine", type="string", enum=["cosine", "plateau"], title="Learning-rate schedule",
                         description="After warm-up: decay the rate along a cosine to 0 at the last epoch, or hold "
                                     "it and cut it on validation plateaus (the Horovod reference's)."),
    "hidden_units": Param("256,128", type="string", pattern=r"^[1-9][0-9]{0,4}(,[1-9][0-9]{0,4}){0,7}$",
                          title="Hidden layer widths",
                          description="Comma-separated units of the MLP's dense layers. The Horovod reference's "
                                      "1000,1000,1000,500 trains ~10x slower for no better forecast "
                                      "(bench/RESULTS.md)."),
    "warm_start": Param(True, type="boolean", title="Warm start",
                        description="Start from the champion as of the date (trained on data up to then; new "
                                    "vocabulary values get fresh embedding rows) and fine-tune it for "
                                    "warm_start_epochs. Off, or without a compatible champion: a cold start."),
    "warm_start_epochs": Param(3, type="integer", minimum=1, maximum=1000, title="Warm-start epochs"),
    "promotion_tolerance": Param(0.0, type="number", minimum=-1.0, maximum=1.0, title="Promotion tolerance",
                                 description="Promote if the new model beats the naive baseline and its val "
                                             "exp_rmspe <= champion's x (1 + tolerance), on the same rows. Negative "
                                             "values demand an improvement; -1 freezes the champion."),
    "season_tolerance": Param(0.0, type="number", minimum=-1.0, maximum=1.0, title="Season backtest tolerance",
                              description="The network forecasts only if, replayed a year earlier (trained on the "
                                          "rows up to D - 364 - 48, scored on D - 364 .. D - 316), its exp_rmspe < "
                                          "the naive baseline's x (1 + tolerance) there; else the naive seasonal "
                                          "baseline is the day's forecast. 0 (the default): it must beat the "
                                          "baseline; raise it only for smoke runs too short to; -1 always "
                                          "forecasts with the naive baseline."),
    "baseline_tolerance": Param(0.0, type="number", minimum=0.0, maximum=1.0, title="Baseline tolerance",
                                description="Promote only if the new model's val exp_rmspe < the naive seasonal "
                                            "baseline's x (1 + tolerance), on the same rows. 0 (the default): it "
                                            "must beat the baseline. Raise it only for smoke runs too short to "
                                            "beat it."),
    "bias_alert_threshold": Param(BIAS_ALERT_THRESHOLD, type="number", exclusiveMinimum=0, maximum=1,
                                  title="Bias alert threshold",
                                  description="publish_scores alerts when the median forecast/actual ratio over the "
                                              "last 14 scored days is off 1 by more than this (0.05: outside "
                                              "0.95-1.05), or the model loses to the naive baseline there."),
    "max_staleness_days": Param(DEFAULT_MAX_STALENESS_DAYS, type="integer", minimum=0,
                                maximum=MAX_STALENESS_DAYS_LIMIT, title="Freshness tolerance (days)",
                                description="How many days train.csv's latest row may lie before the as-of date "
                                            "(late actuals). 0: the drop must hold the as-of date's own actuals; "
                                            "prepare refuses a staler drop as a stale extract."),
    "allow_unverified_drop": Param(ALLOW_UNVERIFIED_DROP, type="boolean", title="Allow unverified drops",
                                   description="Prepare a drop closed by an empty _SUCCESS marker (no manifest of "
                                               "sizes and SHA-256 to check the files against); the forecast report "
                                               "then says the drop was not verified. Off: such a drop fails "
                                               "prepare."),
    "raw_drop_timeout_s": Param(6 * 3600, type="integer", minimum=10, maximum=7 * 24 * 3600,
                                title="Raw drop timeout (s)",
                                description="How long the sensor waits for the day's _SUCCESS marker."),
}

DEFAULT_ARGS = {
    "owner": "forecasting",
    "retries": 2,
    "retry_delay": timedelta(minutes=1),
    "retry_exponential_backoff": 2.0,  # a multiplier in Airflow 3: 1-2, then 2-4 min (with jitter)
    "max_retry_delay": timedelta(minutes=15),
    "execution_timeout": timedelta(hours=3),
    # A task that fails for good (not a retried try) posts to the rossmann_alerts connection, when there is one.
    "on_failure_callback": [task_failure_alert()],
}


def spark_job(task_id: str, job_file: str, application_args: list, drop, operator=RossmannSparkSubmitOperator,
              **spark_settings) -> RossmannSparkSubmitOperator:
    return operator(
        task_id=task_id,
        application=f"{JOBS_ROOT}/rossmann_jobs/{job_file}",
        py_files=PY_FILES,
        name=f"rossmann-{task_id}",
        conn_id="spark_default",
        aws_conn_id=jobs_aws_conn_id(),   # the jobs' S3 identity (aws_default unless configured)
        application_args=application_args,
        drop=drop,   # launch settings (JIT) follow the size of the run's drop
        # One Spark job at a time across all runs (rossmann/pools.py), and one of each kind per DAG.
        pool=SPARK_POOL,
        max_active_tis_per_dag=1,
        **spark_settings,
    )


@dag(
    dag_id="rossmann_forecast",
    # Data intervals: the run for day D starts after D ends, with ds = D, so as-of D covers only complete days.
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    # The first day of the Rossmann history: runs (and backfills) may use any as-of date from then on; Airflow
    # creates no task instances for a logical date before start_date.
    start_date=datetime(2013, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    # Two runs, so the current day's run waiting for its drop never blocks a manual run or a backfill; the
    # Spark tasks and the gate still run one at a time (max_active_tis_per_dag below).
    max_active_runs=2,
    default_args=DEFAULT_ARGS,
    params=PARAMS,
    tags=["rossmann", "forecast", "spark", "horovod"],
    doc_md=__doc__,
)
def rossmann_forecast():
    @task
    def plan_run(params=None, dag_run=None, logical_date=None) -> dict[str, str]:
        """Run-scoped URIs from the as-of date (param, else logical date, else run date) and the run id."""
        from airflow.sdk.exceptions import AirflowFailException

        from rossmann.uris import configured_run_uris, run_as_of

        try:
            as_of = run_as_of(params["as_of"], logical_date, dag_run.run_after)
        except ValueError as error:
            raise AirflowFailException(str(error)) from None   # the same params fail the same way: no retry
        return configured_run_uris(as_of, dag_run.run_id)

    @task
    def find_champion(plan: dict[str, str], params=None) -> dict:
        """The champion as of the run's date (history record with the greatest as-of <= it), for train to score
        and, with the warm_start param, to start from."""
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        from rossmann import forecast_tasks

        return forecast_tasks.find_champion(S3Hook(aws_conn_id="aws_default"), plan,
                                            warm_start=bool(params["warm_start"]))

    @task
    def read_train_metrics(plan: dict[str, str]) -> dict:
        """The committed model's metrics.json, reduced to the numbers the gate and the UI need."""
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        from rossmann import forecast_tasks

        return forecast_tasks.scored_model(S3Hook(aws_conn_id="aws_default"), plan)

    # One gate at a time across runs (the record and pointer writes are compare-and-sets as well, for what this
    # scheduler does not see: rossmann/outputs.py compare_and_set_json).
    @task(max_active_tis_per_dag=1)
    def quality_gate(plan: dict[str, str], metrics: dict, params=None, dag_run=None) -> dict:
        """Promote the new model (pinned copy) if it beats the baseline and is not worse than the champion as of the
        date, on the same rows; predict uses the champion as of the date after the decision."""
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        from rossmann import forecast_tasks

        return forecast_tasks.apply_quality_gate(S3Hook(aws_conn_id="aws_default"), plan, metrics,
                                                 float(params["promotion_tolerance"]), dag_run.run_id,
                                                 baseline_tolerance=float(params["baseline_tolerance"]),
                                                 season=metrics.get("season_backtest"),
                                                 season_tolerance=float(params["season_tolerance"]))

    # One publication at a time across runs: the pointer's read-compare-write must not interleave.
    @task(outlets=[FORECAST_ASSET], max_active_tis_per_dag=1)
    def publish_forecast(plan: dict[str, str], gate: dict, dag_run=None, outlet_events=None, **context) -> dict:
        """Check the committed forecast, point `forecast/latest.json` at it (unless a newer as-of date's forecast
        is there: a backfill) and emit the asset event (extra "latest": whether the pointer holds this one)."""
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        from rossmann import forecast_tasks

        forecast, latest = forecast_tasks.publish_forecast(S3Hook(aws_conn_id="aws_default"), plan, gate,
                                                           dag_run.run_id, {**context, "dag_run": dag_run})
        outlet_events[FORECAST_ASSET].extra = {**{key: forecast[key] for key in
                                                  ("as_of", "run_id", "submission_uri", "report_uri",
                                                   "forecast_model")},
                                               "latest": latest}
        return forecast

    # Skips the scoring tasks when no registered forecast can be scored with this drop yet.
    @task.short_circuit
    def find_forecasts_to_score(plan: dict[str, str]) -> str | None:
        """Write the list of published forecasts this run's drop can score; its URI, None (skip) when empty."""
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        from rossmann import past_forecast_tasks

        return past_forecast_tasks.find_forecasts_to_score(S3Hook(aws_conn_id="aws_default"), plan)

    @task(outlets=[SCORES_ASSET])
    def publish_scores(plan: dict[str, str], params=None, outlet_events=None, **context) -> dict:
        """The scores summary reduced to a few numbers (model vs baseline, the recent bias check), as XCom and the
        scores asset's extra; posts a drift alert when the last 14 days show bias or a loss to the baseline."""
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        from rossmann import past_forecast_tasks

        compact = past_forecast_tasks.publish_scores(S3Hook(aws_conn_id="aws_default"), plan,
                                         float(params["bias_alert_threshold"]), context)
        outlet_events[SCORES_ASSET].extra = compact
        return compact

    plan = plan_run()
    wait_for_raw_drop = RawDropSensor(
        task_id="wait_for_raw_drop",
        bucket_key=plan["raw_marker"],
        aws_conn_id="aws_default",
        timeout=PARAMS["raw_drop_timeout_s"].value,
        timeout_param="raw_drop_timeout_s",
    )
    prepare = spark_job("prepare_features", "prepare.py", [
        "--raw", plan["raw"], "--out", plan["features"], "--as-of", plan["as_of"],
        "--sample-rate", "{{ params.sample_rate }}", "--seed", "{{ params.seed }}",
        "--validation-window", "{{ params.validation_window }}",
        "--max-staleness-days", "{{ params.max_staleness_days }}",
        "{{ '--allow-unverified-drop' if params.allow_unverified_drop else '--no-allow-unverified-drop' }}",
    ], drop=plan["raw"])
    champion = find_champion(plan)
    train = spark_job("train_model", "train.py", [
        "--features", plan["features"], "--out", plan["model"],
        "--num-proc", "{{ params.num_proc }}", "--epochs", "{{ params.epochs }}",
        "--batch-size", "{{ params.batch_size }}", "--learning-rate", "{{ params.learning_rate }}",
        "--lr-schedule", "{{ params.lr_schedule }}", "--hidden-units", "{{ params.hidden_units }}",
        "--champion-model", champion["champion_model_uri"],   # "" when there is no champion as of the date
        # The champion record's SHA-256 digests of the model files: the job loads the champion only as recorded.
        "--champion-model-sha256", champion["champion_model_sha256"],
        "--warm-start-model", champion["warm_start_model_uri"],   # "" for a cold start
        "--warm-start-model-sha256", champion["champion_model_sha256"],
        "--warm-start-epochs", "{{ params.warm_start_epochs }}",
    ], drop=plan["raw"])
    # The recipe replayed a year earlier, for the gate: the same training params, cold, scored against the naive
    # baseline on the year-earlier horizon (rossmann_jobs/training/season_backtest.py).
    season_backtest = spark_job("backtest_season", "train.py", [
        "--features", plan["features"], "--out", plan["season_backtest"], "--season-backtest",
        "--num-proc", "{{ params.num_proc }}", "--epochs", "{{ params.epochs }}",
        "--batch-size", "{{ params.batch_size }}", "--learning-rate", "{{ params.learning_rate }}",
        "--lr-schedule", "{{ params.lr_schedule }}", "--hidden-units", "{{ params.hidden_units }}",
    ], drop=plan["raw"])
    metrics = read_train_metrics(plan)
    gate = quality_gate(plan, metrics)
    predict = spark_job("predict", "predict.py", [
        "--model", gate["champion_model_uri"], "--model-sha256", gate["champion_model_sha256"],
        "--features", plan["features"], "--raw", plan["raw"],
        "--out", plan["predictions"],
        # For the report: this run's model (gate comparison, training curves), the decision, the scores so far.
        "--trained-model", plan["model"], "--gate-decision", gate["reason"], "--scores", plan["scores"],
    ], drop=plan["raw"], operator=PredictSubmitOperator)
    published = publish_forecast(plan, gate)
    to_score = find_forecasts_to_score(plan)
    # Needs only the drop and the registry: it never waits for this run's training.
    score = spark_job("score_forecasts", "score.py", [
        "--raw", plan["raw"], "--as-of", plan["as_of"], "--forecasts", to_score, "--out", plan["scores"],
    ], drop=plan["raw"])
    wait_for_raw_drop >> to_score
    score >> publish_scores(plan)

    # After train_model, not beside it: one Spark job runs at a time anyway (the pool), and a train retry after a
    # lost executor must not wait behind the backtest.
    wait_for_raw_drop >> prepare >> champion >> train >> season_backtest >> metrics
    predict >> published


rossmann_forecast()
