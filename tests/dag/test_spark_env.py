"""spark-submit starts with an allow-listed environment: the task process's Airflow connections, keys and database
settings never reach the Spark driver (nor, through Horovod, the ranks); PATH, Java, Spark, the project's ROSSMANN_*
settings and the jobs' own S3 settings do. Run through the operator's execute and the provider's Popen, with a
stand-in `spark-submit` on PATH that writes down the environment it was started with (no JVM: a second or so)."""
from __future__ import annotations

import json
import os
import stat

import pytest

PLANTED = {
    "AIRFLOW_CONN_AWS_DEFAULT": json.dumps({"conn_type": "aws", "login": "airflow-key-id",
                                            "password": "airflow-identity-planted"}),
    "AIRFLOW__CORE__FERNET_KEY": "fernet-planted",
    "AIRFLOW__API_AUTH__JWT_SECRET": "jwt-planted",
    "AIRFLOW__API__SECRET_KEY": "api-planted",
    # Assembled, so that the repository's credential scan (test_repo_secrets.py) finds no URL with a password here.
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:" + "db-password-planted" + "@postgres/airflow",
    "FOO_SECRET": "foo-planted",
    "ROSSMANN_S3_SECRET_KEY": "rossmann-secret-planted",
    # Compose hands the Spark secret to the scheduler's entrypoint, which writes spark-defaults.conf from it.
    "SPARK_AUTH_SECRET": "spark-secret-planted",
    "PYSPARK_DRIVER_TOKEN": "pyspark-token-planted",
    # The task process's own AWS identity (Airflow's): the jobs get theirs from their connection instead.
    "AWS_ACCESS_KEY_ID": "airflow-env-key-id",
    "AWS_SECRET_ACCESS_KEY": "airflow-env-secret-planted",
}
NEEDED = {"ROSSMANN_BUCKET": "rossmann-env-test", "JAVA_HOME": "/opt/java-planted", "SPARK_LOCAL_IP": "127.0.0.1",
          "PYSPARK_PYTHON": "/opt/jobs/bin/python", "LC_ALL": "C.UTF-8"}
JOBS_CONN = {"conn_type": "aws", "login": "jobs-key-id", "password": "jobs-secret",
             "extra": {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-central-1"}}
JOBS_AWS = {"AWS_ACCESS_KEY_ID": "jobs-key-id", "AWS_SECRET_ACCESS_KEY": "jobs-secret",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "eu-central-1"}


def test_the_allow_list_keeps_what_the_jobs_need_and_nothing_else():
    from rossmann.spark_submit import spark_submit_environment

    parent = {**PLANTED, **NEEDED, "PATH": "/usr/bin", "HOROVOD_GLOO_TIMEOUT_SECONDS": "60",
              "HOROVOD_SECRET_KEY": "x", "ROSSMANN_S3_ACCESS_KEY": "id", "ROSSMANN_DB_PASSWORD": "x"}
    child = spark_submit_environment(parent, JOBS_AWS)
    assert child == {**NEEDED, "PATH": "/usr/bin", "HOROVOD_GLOO_TIMEOUT_SECONDS": "60", **JOBS_AWS}


@pytest.fixture
def fake_spark_submit(tmp_path, monkeypatch):
    """A `spark-submit` first on PATH that writes its environment (JSON) to the file named by its last argument;
    the Spark and jobs connections; the planted secrets and the needed settings in the task process."""
    bin_dir, dump = tmp_path / "bin", tmp_path / "child-env.json"
    bin_dir.mkdir()
    script = bin_dir / "spark-submit"
    script.write_text("#!/bin/sh\nfor last; do :; done\n"
                      "exec python3 -c 'import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], \"w\"))'"
                      ' "$last"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_ENV_TEST", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    monkeypatch.setenv("AIRFLOW_CONN_AWS_JOBS_ENV_TEST", json.dumps(JOBS_CONN))
    for name, value in {**PLANTED, **NEEDED}.items():
        monkeypatch.setenv(name, value)
    return dump


def child_environment(operator_class, dump, **kwargs) -> dict[str, str]:
    operator_class(task_id="predict", application="/x/rossmann_jobs/predict.py", conn_id="spark_env_test",
                   application_args=[str(dump)], **kwargs).execute({})
    return json.loads(dump.read_text())


def test_spark_submit_never_gets_airflows_secrets(fake_spark_submit):
    from rossmann.spark_submit import RossmannSparkSubmitOperator

    child = child_environment(RossmannSparkSubmitOperator, fake_spark_submit, aws_conn_id="aws_jobs_env_test")
    leaked = sorted(name for name in child if name.startswith("AIRFLOW") or name in PLANTED and name not in JOBS_AWS)
    assert leaked == []
    assert not [name for name, value in child.items() if value in set(PLANTED.values())]
    assert child.items() >= {**NEEDED, **JOBS_AWS}.items()             # the jobs' identity, never the task's
    assert child["PATH"] == os.environ["PATH"]
    assert os.environ["AWS_ACCESS_KEY_ID"] == PLANTED["AWS_ACCESS_KEY_ID"]   # the task process is left as it was


def test_the_stock_operator_hands_them_all_on(fake_spark_submit):
    """Negative control: the provider's SparkSubmitOperator starts spark-submit with a copy of os.environ."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    child = child_environment(SparkSubmitOperator, fake_spark_submit)
    assert child.items() >= PLANTED.items()


def test_env_vars_are_refused_rather_than_merged_into_the_whole_environment(fake_spark_submit):
    from rossmann.spark_submit import RossmannSparkSubmitOperator

    with pytest.raises(ValueError, match="env_vars are not supported"):
        child_environment(RossmannSparkSubmitOperator, fake_spark_submit, aws_conn_id=None,
                          env_vars={"EXTRA": "1"})
    assert not fake_spark_submit.exists()


def test_a_real_spark_submit_runs_its_driver_with_the_allow_listed_environment(tmp_path, monkeypatch):
    """The allow-list is enough for spark-submit to start a Python driver (the jobs environment's spark-submit and
    Java), and that driver sees none of the planted secrets. A driver that starts no SparkContext: a few seconds."""
    import shutil

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from rossmann.spark_submit import AllowListedSparkSubmitHook

    if shutil.which("spark-submit") is None:
        pytest.skip("no spark-submit on PATH (the jobs environment's bin/)")
    driver, dump = tmp_path / "driver.py", tmp_path / "driver-env.json"
    driver.write_text("import json, os, sys\njson.dump(dict(os.environ), open(sys.argv[1], 'w'))\n")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_ENV_REAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ROSSMANN_BUCKET", NEEDED["ROSSMANN_BUCKET"])
    hook = SparkSubmitHook(conn_id="spark_env_real", application_args=[str(dump)], name="env-check",
                           conf={"spark.ui.enabled": "false"})
    AllowListedSparkSubmitHook.from_hook(hook, JOBS_AWS).submit(str(driver))
    child = json.loads(dump.read_text())
    assert not [name for name, value in child.items() if value in set(PLANTED.values())]
    assert not [name for name in child if name.startswith("AIRFLOW")]
    assert child["ROSSMANN_BUCKET"] == NEEDED["ROSSMANN_BUCKET"] and child.items() >= JOBS_AWS.items()
