"""Unit tests of the pure Airflow-side helpers: run planning, metrics summary, AWS settings (the gate: test_gate.py)."""
from __future__ import annotations

import json
import re
from datetime import date, datetime, timezone

import pytest

from rossmann.bootstrap import py_files_warning
from rossmann.outputs import train_summary
from rossmann.pools import SPARK_POOL_SLOTS_ENV, spark_pool_slots
from rossmann.publication import replaces_latest
from rossmann.sensors import poke_interval_for
from rossmann.spark_submit import aws_environment, bad_input_reason, launch_failure_reason, no_retry_reason
from rossmann.uris import champion_record_uri, pinned_model_uri, plan_run_uris, record_as_of, run_as_of, run_key


def test_as_of_is_the_runs_date_or_an_earlier_param_never_a_later_one():
    day = datetime(2015, 7, 31, tzinfo=timezone.utc)
    later = datetime(2015, 8, 20, 9, 30, tzinfo=timezone.utc)
    assert run_as_of(None, day, later) == date(2015, 7, 31)           # the logical date decides, not the trigger time
    assert run_as_of("", None, later) == date(2015, 8, 20)            # a manual run without a logical date
    assert run_as_of("2015-07-15", day, later) == date(2015, 7, 15)   # a re-forecast of an earlier day
    assert run_as_of("2015-07-31", day, later) == date(2015, 7, 31)
    with pytest.raises(ValueError, match="as_of 2015-08-01 is after the run's own date 2015-07-31"):
        run_as_of("2015-08-01", day, later)
    with pytest.raises(ValueError, match="after the run's own date 2015-08-20"):
        run_as_of("2016-01-01", None, later)


def test_run_key_is_storage_safe_and_keeps_distinct_runs_distinct():
    key = run_key("manual__2015-07-31T00:00:00+00:00")
    # Readable (the sanitized run id), then a short hash of the exact run id; stable: the same id, the same key.
    assert key == "manual__2015-07-31T00_00_00_00_00-30b070a7" == run_key("manual__2015-07-31T00:00:00+00:00")
    assert re.fullmatch(r"[A-Za-z0-9._-]+", key)
    assert run_key("backfill__2015-07-30T00:00:00+00:00") != run_key("scheduled__2015-07-30T00:00:00+00:00")
    with pytest.raises(ValueError):
        run_key("///")


def test_run_ids_that_sanitize_alike_get_distinct_keys_and_prefixes():
    """Two run ids whose readable parts are equal (a manual run named like another run's sanitized id) never share a
    run key, so neither commits into the other's runs/, champions/ or registry prefixes."""
    one, other = "manual__2015-07-31T00:00:00+00:00", "manual__2015-07-31T00_00_00_00_00"
    assert run_key(one).rsplit("-", 1)[0] == run_key(other).rsplit("-", 1)[0]    # the readable part collides
    assert run_key(one) != run_key(other)
    first, second = (plan_run_uris("rossmann", date(2015, 7, 31), run) for run in (one, other))
    for name in ("features", "model", "predictions", "champion_models", "forecast_record", "scoring_forecasts"):
        assert first[name] != second[name], name


def test_plan_is_run_scoped_and_dated():
    plan = plan_run_uris("rossmann", date(2015, 7, 31), "scheduled__2015-07-31T00:00:00+00:00")
    key = run_key("scheduled__2015-07-31T00:00:00+00:00")
    run_root = f"s3://rossmann/runs/2015-07-31/{key}"
    assert plan.items() >= {
        "as_of": "2015-07-31",
        "raw": "s3://rossmann/raw/2015-07-31",
        "raw_marker": "s3://rossmann/raw/2015-07-31/_SUCCESS",
        "features": f"{run_root}/features",
        "model": f"{run_root}/model",
        "predictions": f"{run_root}/predictions",
        "champion": "s3://rossmann/models/champion.json",
        "champion_history": "s3://rossmann/models/champions/history",
        "champion_record": "s3://rossmann/models/champions/history/2015-07-31.json",
        "champion_models": f"s3://rossmann/models/champions/2015-07-31/{key}",
        "forecast_pointer": "s3://rossmann/forecast/latest.json",
    }.items()


def test_forecast_pointer_moves_only_to_the_same_or_a_later_as_of_date():
    current = {"as_of": "2015-07-31", "run_id": "scheduled__2015-07-31", "decided_at": "2015-08-01T01:00:00+00:00"}
    assert replaces_latest({"as_of": "2015-07-31"}, None)
    assert replaces_latest({"as_of": "2015-08-01", "decided_at": "2015-08-01T00:00:00+00:00"}, current)
    assert replaces_latest({**current, "published_at": "later"}, current)   # a re-publish of the same decision
    assert not replaces_latest({"as_of": "2015-07-30", "decided_at": "2015-08-02T00:00:00+00:00"}, current)  # backfill
    assert not replaces_latest({"as_of": "2014-12-31"}, current)


def test_of_two_decisions_for_one_date_the_earlier_never_replaces_the_later():
    """A run whose gate decided first but publishes last (it lost a same-date race) leaves the later decision's
    forecast in latest.json; a later decision replaces an earlier one, and a pointer written before decisions were
    stamped counts as the oldest of its date. Champion records order by promoted_at the same way."""
    later = {"as_of": "2015-07-31", "run_id": "a", "decided_at": "2015-08-01T01:00:00+00:00"}
    earlier = {"as_of": "2015-07-31", "run_id": "b", "decided_at": "2015-08-01T00:59:00+00:00"}
    assert not replaces_latest(earlier, later) and replaces_latest(later, earlier)
    assert replaces_latest(earlier, {"as_of": "2015-07-31", "run_id": "old"})
    assert not replaces_latest({"as_of": "2015-07-31", "run_id": "old"}, earlier)
    assert not replaces_latest({"as_of": "2015-07-31", "promoted_at": "2015-08-01T00:00:00+00:00"},
                               {"as_of": "2015-07-31", "promoted_at": "2015-08-01T00:30:00+00:00"})
    # Negative control: the as-of date alone (the rule before) lets the earlier decision replace the later one.
    assert date.fromisoformat(earlier["as_of"]) >= date.fromisoformat(later["as_of"])


def test_pinned_model_uri_is_one_folder_per_attempt():
    champions = "s3://b/models/champions/2015-07-31/r1"
    first = pinned_model_uri(champions, "s3://b/runs/2015-07-31/r1/model/attempts/20150801T000000Z-aaaa/")
    second = pinned_model_uri(champions, "s3://b/runs/2015-07-31/r1/model/attempts/20150801T010000Z-bbbb")
    assert first == f"{champions}/20150801T000000Z-aaaa" and second == f"{champions}/20150801T010000Z-bbbb"


def test_champion_history_records_are_named_by_their_as_of_date():
    history = "s3://rossmann/models/champions/history"
    assert champion_record_uri(history + "/", "2015-07-31") == f"{history}/2015-07-31.json"
    assert record_as_of(champion_record_uri(history, "2015-07-31")) == "2015-07-31"
    for other in (f"{history}/2015-07-31.json.tmp", f"{history}/latest.json", f"{history}/20150731.json",
                  f"{history}/2015-02-30.json", f"{history}/"):
        assert record_as_of(other) is None, other


def test_train_summary_extracts_the_gate_inputs():
    scores = {"challenger": 0.17, "champion": None, "baseline": 0.2, "validation_rows": 420, "champion_model_uri": None}
    metrics = {"best_val_exp_rmspe": 0.18, "best_epoch": 3, "epochs": [{"epoch": 1}] * 4, "epochs_run": 4,
               "stopped_early": True, "mean_samples_per_second": 950.5, "horovod_size": 2, "ranks": [{}, {}],
               "gate_scores": scores,
               "warm_start": {"requested": "s3://b/champ", "used": True, "source_model": "s3://b/champ",
                              "model_attempt": "s3://b/champ/attempts/a1", "fresh_embedding_rows": {"Store": 1}}}
    assert train_summary(metrics, "s3://b/m/metrics.json") == {
        "best_val_exp_rmspe": 0.18, "best_epoch": 3, "epochs_run": 4, "stopped_early": True, "samples_per_s": 950.5,
        "horovod_size": 2, "gate_scores": scores,
        "warm_start": {"used": True, "requested": "s3://b/champ", "reason": None}}
    # Metrics of a train job before warm starts existed: no warm start.
    older = train_summary({key: value for key, value in metrics.items() if key != "warm_start"}, "m")
    assert older["warm_start"] == {"used": None, "requested": None, "reason": None}


def test_train_summary_names_the_file_when_the_score_is_missing():
    with pytest.raises(ValueError, match="s3://b/m/metrics.json.*best_val_exp_rmspe"):
        train_summary({"loss": 1.0}, "s3://b/m/metrics.json")


def test_poke_interval_scales_with_the_timeout():
    assert poke_interval_for(15) == 5
    assert poke_interval_for(600) == 30
    assert poke_interval_for(6 * 3600) == 300


def test_aws_environment_comes_from_the_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_TEST_S3", json.dumps({
        "conn_type": "aws", "login": "key-id", "password": "s3cr3t",
        "extra": {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-central-1"}}))
    assert aws_environment("test_s3") == {
        "AWS_ACCESS_KEY_ID": "key-id", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "eu-central-1"}


def test_aws_environment_sets_nothing_for_role_based_connections(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_TEST_ROLE", json.dumps({"conn_type": "aws", "extra": {}}))
    assert aws_environment("test_role") == {}
    assert aws_environment(None) == {}


SUBMIT_ERROR = ("Cannot execute: spark-submit --master local[2] rossmann_jobs/prepare.py. Error code is: {code}.\n"
                "Last spark-submit output:\n"
                "26/11/24 02:16:59 INFO SparkContext: Successfully stopped SparkContext\n"
                "2026-11-24 02:17:00,001 ERROR [rossmann] prepare failed: s3://b/raw/2015-05-02/store_states.csv: "
                "wrong delimiter: 3 of 3 lines have semicolons\n"
                "26/11/24 02:17:00 INFO ShutdownHookManager: Shutdown hook called")


def test_bad_input_reason_is_the_jobs_failure_line_only_for_exit_status_2():
    assert bad_input_reason(SUBMIT_ERROR.format(code=2)) == (
        "prepare failed: s3://b/raw/2015-05-02/store_states.csv: wrong delimiter: 3 of 3 lines have semicolons")
    # Any other status (a crash, an OOM, a lost executor) keeps the retry policy.
    assert bad_input_reason(SUBMIT_ERROR.format(code=1)) is None
    assert bad_input_reason(SUBMIT_ERROR.format(code=137)) is None
    # Status 2 without the line (cut off by a huge stack trace) still fails fast, pointing at the log.
    assert "exit status 2" in bad_input_reason("Cannot execute: spark-submit x. Error code is: 2.")


def test_a_spark_submit_without_spark_is_a_set_up_failure_not_a_bad_input():
    # What pyspark's spark-submit printed on a worker without SPARK_HOME (tests/dag/test_wheel_install.py found it).
    error = ("Cannot execute: spark-submit --master local[2] /venv/rossmann_jobs/prepare.py. Error code is: 127.\n"
             "Last spark-submit output:\n"
             "Could not find valid SPARK_HOME while searching ['/tmp/x', '/opt/jobs-venv/bin']\n"
             "/opt/jobs-venv/bin/spark-submit: line 27: /bin/spark-class: No such file or directory")
    reason = launch_failure_reason(error)
    assert reason.startswith("spark-submit could not start: Could not find valid SPARK_HOME while searching")
    assert "Set SPARK_HOME" in reason and "docs/deploy.md" in reason
    assert bad_input_reason(error) is None
    # Spark 3.5's refusal of cluster deploy mode for a Python job on a standalone master (seen with spark-submit).
    refused = ("Cannot execute: spark-submit --master spark://m:7077 --deploy-mode cluster p.py. Error code is: 1.\n"
               "Exception in thread \"main\" org.apache.spark.SparkException: Cluster deploy mode is currently not "
               "supported for python applications on standalone clusters.\n\tat org.apache.spark.deploy...")
    assert "Use deploy-mode client" in launch_failure_reason(refused)
    # A job that started and failed, for whatever reason, is not a set-up failure: the retry policy holds.
    assert launch_failure_reason(SUBMIT_ERROR.format(code=1)) is None
    assert launch_failure_reason(SUBMIT_ERROR.format(code=2)) is None
    # The operator's one verdict: each not-retried failure says why; any other failure keeps the retries.
    assert no_retry_reason(error) == f"{reason} (not retried)"
    assert no_retry_reason(SUBMIT_ERROR.format(code=2)).endswith("(bad input: not retried; fix the input and clear "
                                                                  "the task)")
    assert no_retry_reason(SUBMIT_ERROR.format(code=1)) is None


def test_spark_pool_slots_default_to_one_and_refuse_nonsense():
    assert spark_pool_slots({}) == 1
    assert spark_pool_slots({SPARK_POOL_SLOTS_ENV: "3"}) == 3
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(ValueError, match=SPARK_POOL_SLOTS_ENV):
            spark_pool_slots({SPARK_POOL_SLOTS_ENV: bad})


def _drop_sensor(deferrable: bool):
    from rossmann.sensors import RawDropSensor

    return RawDropSensor(task_id="wait_for_raw_drop", bucket_key="s3://rossmann/raw/2015-07-31/_SUCCESS",
                         aws_conn_id="aws_default", timeout=6 * 3600, timeout_param="raw_drop_timeout_s",
                         deferrable=deferrable)


def test_the_deferrable_sensor_hands_the_wait_to_the_triggerer_with_the_runs_timeout(monkeypatch):
    from datetime import timedelta

    from airflow.providers.amazon.aws.triggers.s3 import S3KeyTrigger
    from airflow.sdk.exceptions import TaskDeferred

    sensor = _drop_sensor(deferrable=True)
    monkeypatch.setattr(type(sensor), "poke", lambda self, context: False)   # the marker is not there yet
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"params": {"raw_drop_timeout_s": 600}})
    trigger = deferred.value.trigger
    assert isinstance(trigger, S3KeyTrigger) and trigger.bucket_key == "s3://rossmann/raw/2015-07-31/_SUCCESS"
    assert deferred.value.timeout == timedelta(seconds=600)
    assert trigger.poke_interval == poke_interval_for(600) == 30


def test_the_sensor_says_at_once_which_marker_it_waits_for_and_until_when(monkeypatch, capsys):
    """A first unpause creates a run for yesterday that waits for a drop: its log must name the key, the deadline
    and what to do, before the wait (deferred or poked) starts."""
    from datetime import datetime, timedelta, timezone

    from airflow.sdk.exceptions import TaskDeferred

    sensor = _drop_sensor(deferrable=True)
    monkeypatch.setattr(type(sensor), "poke", lambda self, context: False)
    before = datetime.now(timezone.utc)
    with pytest.raises(TaskDeferred):
        sensor.execute({"params": {"raw_drop_timeout_s": 7200}})
    after = datetime.now(timezone.utc)
    # Airflow's task logger writes to stdout here (structlog), not through the logging module.
    said = [line for line in capsys.readouterr().out.splitlines() if "Waiting for" in line]
    assert len(said) == 1, said
    assert "Waiting for s3://rossmann/raw/2015-07-31/_SUCCESS, checking every 300 s, until " in said[0]
    deadlines = {(moment + timedelta(seconds=7200)).strftime("%Y-%m-%d %H:%M UTC") for moment in (before, after)}
    assert any(f"until {deadline} (raw_drop_timeout_s 7200 s)" in said[0] for deadline in deadlines), said[0]
    assert "rossmann_jobs.synth land" in said[0] and "mark this run failed" in said[0]


def test_a_deferred_wait_that_times_out_fails_with_the_actionable_message():
    """The triggerer's timeout resumes the task through resume_execution (not execute): same message as a poke."""
    from airflow.sdk.exceptions import AirflowSensorTimeout

    sensor = _drop_sensor(deferrable=True)   # rebuilt on resume: the constructor's timeout, not the run's
    with pytest.raises(AirflowSensorTimeout) as timed_out:
        sensor.resume_execution("__fail__", {"error": "Trigger timeout"}, {"params": {"raw_drop_timeout_s": 600}})
    message = str(timed_out.value)
    assert "No raw data drop arrived: s3://rossmann/raw/2015-07-31/_SUCCESS did not appear within 600 s" in message
    assert "rossmann_jobs.synth land" in message


def test_each_jobs_spark_settings_come_from_the_connection_over_the_projects_defaults():
    from rossmann.spark_submit import DEFAULT_JOB_CONF, job_of, job_spark_conf

    assert job_of("/opt/rossmann/rossmann_jobs/prepare.py") == "prepare"
    with pytest.raises(ValueError, match="not one of the rossmann jobs"):
        job_of("/opt/other/job.py")
    extra = {"spark_conf": {"spark.pyspark.python": "/venv/bin/python", "spark.executor.memory": "2g"},
             "job_conf": {"prepare": {"spark.driver.memory": "6g"}, "train": {"spark.executor.memory": "8g"}}}
    assert job_spark_conf({}, "prepare", "spark_default") == DEFAULT_JOB_CONF["prepare"] == \
        {"spark.driver.memory": "2g"}
    assert job_spark_conf(extra, "prepare", "spark_default") == {
        "spark.driver.memory": "6g", "spark.pyspark.python": "/venv/bin/python", "spark.executor.memory": "2g"}
    assert job_spark_conf(extra, "train", "spark_default")["spark.executor.memory"] == "8g"
    assert job_spark_conf(extra, "predict", "spark_default") == extra["spark_conf"]
    with pytest.raises(ValueError, match=r"names \['preapre'\], which are not jobs"):
        job_spark_conf({"job_conf": {"preapre": {}}}, "prepare", "spark_default")
    with pytest.raises(ValueError, match="must map job names to JSON objects"):
        job_spark_conf({"job_conf": {"prepare": "6g"}}, "prepare", "spark_default")


def test_the_submitted_command_carries_the_jobs_configured_driver_memory(monkeypatch):
    """What spark-submit really gets: --conf spark.driver.memory from job_conf (client mode sizes the driver JVM
    from it), with no literal left in the DAG."""
    import json

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from rossmann.spark_submit import RossmannSparkSubmitOperator

    connection = {"conn_type": "spark", "host": "local[2]",
                  "extra": {"job_conf": {"prepare": {"spark.driver.memory": "6g"}}}}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(connection))
    commands = []

    def capture(self, context):   # build the command the hook would run, run nothing
        commands.append(SparkSubmitHook(conf=self.conf, conn_id=self._conn_id)._build_spark_submit_command(
            self.application))

    monkeypatch.setattr(SparkSubmitOperator, "execute", capture)
    operator = RossmannSparkSubmitOperator(task_id="prepare_features", application="/x/rossmann_jobs/prepare.py",
                                           conn_id="spark_default", aws_conn_id=None)
    assert operator._driver_memory is None
    operator.execute({})
    assert "spark.driver.memory=6g" in commands[0]


def test_a_small_drops_jobs_launch_with_c1_only_and_configuration_still_wins(monkeypatch, tmp_path):
    """The JIT flag follows the drop's manifest (train.csv rows): C1 only below the measured size, Spark's default
    above it or without a manifest; a connection's own driver Java options replace the derived ones."""
    import json

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from rossmann.spark_submit import RossmannSparkSubmitOperator
    from rossmann_jobs.launch_settings import C1_BELOW_TRAIN_ROWS, C1_ONLY, CLASS_ARCHIVE_ENV

    commands = []
    monkeypatch.delenv(CLASS_ARCHIVE_ENV, raising=False)

    def capture(self, context):   # build the command the hook would run, run nothing
        commands.append(" ".join(SparkSubmitHook(conf=self.conf, conn_id=self._conn_id)
                                 ._build_spark_submit_command(self.application)))

    monkeypatch.setattr(SparkSubmitOperator, "execute", capture)

    def command_for(train_rows: int | None, extra: dict | None = None, job: str = "prepare") -> str:
        drop = tmp_path / f"drop-{len(commands)}"
        drop.mkdir()
        manifest = {"format": "rossmann-drop/1", "files": {"train.csv": {"rows": train_rows, "bytes": 1}}}
        (drop / "_SUCCESS").write_text("" if train_rows is None else json.dumps(manifest))
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT",
                           json.dumps({"conn_type": "spark", "host": "local[2]", "extra": extra or {}}))
        RossmannSparkSubmitOperator(task_id=job, application=f"/x/rossmann_jobs/{job}.py", conn_id="spark_default",
                                    aws_conn_id=None, drop=str(drop)).execute({})
        return commands[-1]

    small, large = C1_BELOW_TRAIN_ROWS["prepare"] - 1, C1_BELOW_TRAIN_ROWS["prepare"]
    small_command = command_for(small)
    assert f"spark.driver.extraJavaOptions={C1_ONLY}" in small_command
    assert f"spark.executor.extraJavaOptions={C1_ONLY}" in small_command   # a cluster's executors too
    assert f"spark.driver.extraJavaOptions={C1_ONLY}" in command_for(C1_BELOW_TRAIN_ROWS["train"] - 1, job="train")
    assert "extraJavaOptions" not in command_for(large)
    assert "extraJavaOptions" not in command_for(None)   # an empty marker: size unknown
    own = command_for(small, {"spark_conf": {"spark.driver.extraJavaOptions": "-Dmine=1",
                                             "spark.executor.extraJavaOptions": "-Dtheirs=1"}})
    assert "spark.driver.extraJavaOptions=-Dmine=1" in own and C1_ONLY not in own
    assert "spark.executor.extraJavaOptions=-Dtheirs=1" in own
    # The machine's class archive (the embedded stack names it), for a drop of any size.
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"x")
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, str(archive))
    assert f"spark.driver.extraJavaOptions={C1_ONLY} -XX:SharedArchiveFile={archive}" in command_for(small)
    assert f"spark.driver.extraJavaOptions=-XX:SharedArchiveFile={archive}" in command_for(large)


class _ManifestHook:
    """The two S3Hook calls outputs.read_manifest makes, over a dict of keys."""

    def __init__(self, objects: dict[str, str]):
        self.objects = objects

    def check_for_key(self, key, bucket):
        return f"{bucket}/{key}" in self.objects

    def read_key(self, key, bucket):
        return self.objects[f"{bucket}/{key}"]


def test_the_dags_tasks_read_the_manifest_the_jobs_write():
    """The document storage.commit writes (tests/jobs/test_storage.py pins the same keys and attempt layout)."""
    from rossmann.outputs import OutputNotCommittedError, committed_attempt_uri, read_manifest

    written = {"attempt": "attempts/20261124T061000Z-0123abcd", "committed_at": "2026-11-24T06:10:00+00:00",
               "files": ["submission.csv", "report/index.html"], "summary": {"rows": {"test": 3}}}
    hook = _ManifestHook({"b/runs/x/predictions/_SUCCESS": json.dumps(written)})
    assert read_manifest(hook, "s3://b/runs/x/predictions") == written
    assert committed_attempt_uri(hook, "s3://b/runs/x/predictions") == \
        "s3://b/runs/x/predictions/attempts/20261124T061000Z-0123abcd"
    with pytest.raises(OutputNotCommittedError, match="has no committed output"):
        read_manifest(hook, "s3://b/runs/x/model")
    hook.objects["b/runs/x/model/_SUCCESS"] = json.dumps({"attempt": "attempts/a"})
    with pytest.raises(ValueError, match=r"lacks \['committed_at', 'files', 'summary'\]"):
        read_manifest(hook, "s3://b/runs/x/model")


def test_the_operator_and_the_jobs_share_one_bad_input_contract():
    from rossmann.spark_submit import bad_input_reason
    from rossmann_jobs.job_protocol import BAD_INPUT_EXIT_CODE, failure_line

    line = failure_line("predict", ValueError("s3://b/raw/test.csv: column Open\nmust be 0, 1 or blank"))
    assert line == "predict failed: s3://b/raw/test.csv: column Open must be 0, 1 or blank"
    error = f"Cannot execute: spark-submit ... Error code is: {BAD_INPUT_EXIT_CODE}.\n... {line}\n"
    assert bad_input_reason(error) == line
    assert bad_input_reason(error.replace(f"is: {BAD_INPUT_EXIT_CODE}.", "is: 1.")) is None


def test_the_job_scripts_default_to_the_installed_rossmann_jobs():
    """The setup's editable install points at this checkout; a wheel install at its site-packages
    (tests/dag/test_wheel_install.py): never a folder found relative to the DAG file."""
    from pathlib import Path

    from rossmann.spark_submit import default_jobs_root

    root = Path(default_jobs_root())
    assert root == Path(__file__).resolve().parents[2]   # this checkout, which the Airflow env has installed
    assert all((root / "rossmann_jobs" / f"{job}.py").is_file() for job in ("prepare", "train", "predict"))


def test_bootstrap_warns_that_executors_do_not_import_a_shipped_wheel():
    assert py_files_warning("s3a://b/dist/rossmann_jobs.zip") == ""
    assert py_files_warning("") == ""
    warning = py_files_warning("s3a://b/dist/deps.zip, /opt/dist/rossmann_jobs-0.1.0-py3-none-any.WHL")
    assert "/opt/dist/rossmann_jobs-0.1.0-py3-none-any.WHL" in warning and "deps.zip" not in warning
    assert "rossmann_jobs.zip" in warning
