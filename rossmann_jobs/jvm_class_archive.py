"""The class archive (AppCDS) the jobs' Spark driver JVMs start from: `python -m rossmann_jobs.jvm_class_archive OUT`.

Every job is a cold JVM that loads and verifies some 15,000 classes of Spark, Hadoop and Scala before its first
query; a dynamic class-data-sharing archive maps them ready-made (bench/RESULTS.md, "Fixed cost per run"). It is
dumped at the exit of a JVM that ran a small but complete prepare (CSV, windows, joins, Parquet) and an Arrow pass
to Python workers (what train's gate and predict add), and it is only valid for the Java build and the Spark
classpath it was dumped with: the stamp beside it records both, and `--if-stale` rebuilds only when they changed.
A JVM given a stale or foreign archive says so in one warning line and runs without it.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

from rossmann_jobs.launch_settings import C1_ONLY

WORKLOAD_STORES, WORKLOAD_AS_OF = 3, date(2015, 7, 31)


def java_command() -> str:
    """The java spark-submit runs: $JAVA_HOME/bin/java when JAVA_HOME is set, else java on PATH."""
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else (shutil.which("java") or "java")


def spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def stamp() -> str:
    """What the archive is valid for: the Java build (`java -version`) and the jars on Spark's classpath."""
    java = java_command()
    version = subprocess.run([java, "-version"], capture_output=True, text=True, check=True).stderr
    jars = sorted((jar.name, jar.stat().st_size) for jar in spark_jars().glob("*.jar"))
    digest = hashlib.sha256(repr((os.path.realpath(shutil.which(java) or java), version, jars)).encode()).hexdigest()
    return f"{digest}\n"


def stamp_path(archive: Path) -> Path:
    return archive.with_name(archive.name + ".stamp")


def up_to_date(archive: Path) -> bool:
    try:
        return archive.is_file() and stamp_path(archive).read_text() == stamp()
    except OSError:
        return False


def build(archive: Path) -> None:
    """Run the workload in a spark-submit JVM that dumps its loaded classes at exit; install the archive atomically."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rossmann-class-archive-") as work:
        dumped = Path(work) / "classes.jsa"
        spark_submit = Path(sys.executable).parent / "spark-submit"
        # -Xlog:cds=error: the dump warns once per class it cannot archive (pre-Java-6 class files, generated
        # accessors), hundreds of lines that say nothing actionable.
        command = [str(spark_submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                   "--driver-java-options", f"{C1_ONLY} -XX:ArchiveClassesAtExit={dumped} -Xlog:cds=error",
                   __file__, "--workload", work]
        # spark-submit finds Spark's home with the first python on PATH: this environment's.
        env = {**os.environ, "PATH": os.pathsep.join([str(spark_submit.parent), os.environ.get("PATH", "")])}
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0 or not dumped.is_file():
            raise SystemExit(f"class archive: the workload failed (exit {done.returncode}):\n"
                             f"{(done.stdout + done.stderr)[-4000:]}")
        partial = archive.with_name(archive.name + ".partial")
        shutil.copyfile(dumped, partial)
        os.replace(partial, archive)
    stamp_path(archive).write_text(stamp())


def workload(work: str) -> None:
    """A 3-store prepare and an Arrow round trip through Python workers, in this (spark-submitted) JVM."""
    from rossmann_jobs import storage
    from rossmann_jobs.output_layout import TRAIN_DIR
    from rossmann_jobs.prepare import run_prepare
    from rossmann_jobs.spark_session import build_spark_session
    from rossmann_jobs.synth.cli import generate
    from rossmann_jobs.synth.dataset import SynthConfig

    spark = build_spark_session("rossmann-class-archive")
    try:
        raw, features = f"{work}/raw", f"{work}/features"
        generate(raw, SynthConfig(stores=WORKLOAD_STORES, seed=1))
        run_prepare(spark, raw, features, WORKLOAD_AS_OF, num_shards=2)
        rows = spark.read.parquet(storage.join(storage.committed_uri(features), TRAIN_DIR))
        rows.mapInPandas(lambda batches: batches, rows.schema).count()
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archive", nargs="?", type=Path, help="where to write the archive (a .jsa file)")
    parser.add_argument("--if-stale", action="store_true", help="only if absent or built for another Java/classpath")
    parser.add_argument("--workload", help=argparse.SUPPRESS)   # the spark-submitted half
    args = parser.parse_args(argv)
    if args.workload:
        workload(args.workload)
        return 0
    if args.archive is None:
        parser.error("the archive path is required")
    if args.if_stale and up_to_date(args.archive):
        print(f"class archive {args.archive} is up to date")
        return 0
    build(args.archive)
    print(f"class archive {args.archive}: {args.archive.stat().st_size / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
