"""The class archive setup_env.sh builds: a spark-submitted driver JVM started as the DAG starts one loads Spark's
classes from it (not from the jars), and the archive is rebuilt only for another Java build or Spark classpath."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rossmann_jobs import jvm_class_archive
from rossmann_jobs.launch_settings import CLASS_ARCHIVE_ENV, JAVA_OPTIONS, jobs_env_class_archive, launch_conf

TINY_JOB = "from pyspark.sql import SparkSession\nprint('rows', SparkSession.builder.getOrCreate().range(7).count())\n"


def test_a_job_driver_loads_sparks_classes_from_the_archive(tmp_path):
    archive = jobs_env_class_archive(sys.prefix)
    assert archive.is_file(), f"{archive} is missing: scripts/setup_env.sh builds it"
    assert os.environ.get(CLASS_ARCHIVE_ENV) == str(archive)   # tests/jobs/conftest.py, as the embedded stack does
    assert jvm_class_archive.up_to_date(archive), "built for another Java or Spark classpath: run scripts/setup_env.sh"
    script, loaded = tmp_path / "tiny.py", tmp_path / "classes.log"
    script.write_text(TINY_JOB)
    options = f"{launch_conf('prepare', 0)[JAVA_OPTIONS]} -Xlog:class+load=info:file={loaded}"
    bin_dir = os.path.dirname(sys.executable)
    done = subprocess.run([os.path.join(bin_dir, "spark-submit"), "--master", "local[1]", "--driver-java-options",
                           options, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"]})
    assert done.returncode == 0 and "rows 7" in done.stdout, done.stderr[-3000:]
    sources = {}
    for line in loaded.read_text().splitlines():
        if " source: " in line and "org.apache.spark." in line:
            name, source = line.split("] ", 1)[1].split(" source: ", 1)
            sources[name] = source
    assert sources["org.apache.spark.SparkContext"] == "shared objects file (top)", sources.get(
        "org.apache.spark.SparkContext")
    # Of the classes read from class files at all (lambdas and generated code are made at run time either way):
    from_archive = sum(source.startswith("shared objects file") for source in sources.values())
    from_jars = sum(source.endswith(".jar") for source in sources.values())
    assert from_archive / (from_archive + from_jars) > 0.9, f"{from_archive} from the archive, {from_jars} from jars"


def test_the_archive_is_stale_for_another_java_or_classpath(tmp_path, monkeypatch):
    archive = tmp_path / "classes.jsa"
    assert not jvm_class_archive.up_to_date(archive)   # absent
    archive.write_bytes(b"x")
    jvm_class_archive.stamp_path(archive).write_text(jvm_class_archive.stamp())
    assert jvm_class_archive.up_to_date(archive)
    monkeypatch.setattr(jvm_class_archive, "spark_jars", lambda: tmp_path)   # another classpath: no jars
    assert not jvm_class_archive.up_to_date(archive)
    monkeypatch.undo()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-such-jdk"))   # another Java (here: none at all)
    with pytest.raises(OSError):
        jvm_class_archive.stamp()
    assert not jvm_class_archive.up_to_date(archive)
