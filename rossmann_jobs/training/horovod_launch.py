"""What the train job changes in how horovod.spark.run (0.28.1) starts and ends its ranks: seconds, not behaviour,
and the job package's path where the executors receive it with the job (--py-files).

Both changes are checked against Horovod's own code in tests/jobs/test_train_units.py; a Horovod whose internals
differ is left as it is (the change is skipped, never half-applied).
"""
from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("rossmann.train")


def skip_driver_build_check() -> None:
    """Let horovod.spark.run skip its check that Horovod was built with Gloo.

    It checks in a forked copy of this driver, which imports TensorFlow for it (seconds of CPU per run) and, as a
    fork of a py4j client, logs a "Connection reset by peer" traceback. scripts/setup_env.sh checks the build once
    (horovodrun --check-build), and the ranks import the same extension: hvd.init() fails there, naming Gloo, if
    it is missing.
    """
    import horovod.runner.launch

    horovod.runner.launch.gloo_built = lambda verbose=False: True


def time_command_lifetime_from_start() -> bool:
    """In this process, make Horovod's Spark task service keep a rank's command alive at least its minimum
    lifetime *after the command started*, as its docstring says, not after it ended.

    SparkTaskService starts the timer at the end of _run_command, which runs the whole command in its thread: so
    every Spark task of horovod.spark.run sleeps the full 3 s (MINIMUM_COMMAND_LIFETIME_S) after its rank has
    exited, and the train job waits for the last of them. The lifetime exists so that the driver's client can
    still reach a short command's task service for its exit code; timed from the start it still does.
    Returns whether the change applies (False: Horovod's internals differ, left as they are)."""
    from horovod.runner.common.service.task_service import BasicTaskService
    from horovod.runner.common.util import timeout
    from horovod.spark.task.task_service import SparkTaskService

    if getattr(SparkTaskService._run_command, "timed_from_start", False):
        return True
    if not (hasattr(timeout, "Timeout") and "_minimum_command_lifetime" in SparkTaskService.__init__.__code__.co_names
            and "_minimum_command_lifetime" in SparkTaskService.wait_for_command_termination.__code__.co_names):
        log.warning("Horovod's Spark task service is not the one this change was written for: left as it is")
        return False

    def _run_command(self, command, env, event, stdout=None, stderr=None, index=None,
                     prefix_output_with_timestamp=False):
        seconds = self._minimum_command_lifetime_s
        started = None if seconds is None else timeout.Timeout(seconds, message="Just measuring runtime")
        BasicTaskService._run_command(self, command, env, event, stdout, stderr, index, prefix_output_with_timestamp)
        self._minimum_command_lifetime = started

    _run_command.timed_from_start = True
    SparkTaskService._run_command = _run_command
    return True


def _task_mapper(driver_addresses, settings, use_gloo, is_elastic):
    """horovod.spark.runner._make_mapper, with the lifetime timed from the command's start in each Spark task."""
    key = settings.key   # serialised settings carry no key (as in Horovod's own mapper)

    def mapper(index, _):
        from horovod.spark import runner

        time_command_lifetime_from_start()
        share_shipped_python_path()
        yield runner._task_fn(index, driver_addresses, key, settings, use_gloo, is_elastic)

    return mapper


def shipped_python_path(sys_path: list[str], spark_files_root: str) -> list[str]:
    """The entries of a Spark task's sys.path that the job shipped (--py-files: under the SparkFiles root, which
    is the executor's work dir on a cluster), made absolute."""
    root = os.path.abspath(spark_files_root)
    return [os.path.abspath(entry) for entry in sys_path
            if entry and os.path.abspath(entry).startswith(root + os.sep)]


def share_shipped_python_path() -> None:
    """In a Spark task of horovod.spark.run: let the rank it starts import what the job shipped with --py-files.

    Spark's Python worker puts the shipped files on its own sys.path only, and the rank is a new process (Horovod's
    gloo_exec_fn) with the task's environment, which the task service copies from this process: without this it
    would find rossmann_jobs only where the executors' Python has it installed, never in a shipped environment
    (spark.archives)."""
    from pyspark import SparkFiles, TaskContext

    if TaskContext.get() is None:   # not in a Spark task: nothing was shipped to this process
        return
    shipped = shipped_python_path(sys.path, SparkFiles.getRootDirectory())
    if shipped:
        os.environ["PYTHONPATH"] = os.pathsep.join([*shipped, *filter(None, [os.environ.get("PYTHONPATH")])])


def rank_python(spark_conf: dict[str, str], environ: dict[str, str], driver_python: str) -> str:
    """The Python each Horovod rank runs in: the executors' own (spark.pyspark.python, else PYSPARK_PYTHON, Spark's
    order), which horovod.spark.run would otherwise take from the driver (sys.executable). They differ where the
    executors run a shipped environment (spark.archives, relative to the executor's work dir, where the rank's
    command runs) or another install path than the machine that submits the job."""
    return spark_conf.get("spark.pyspark.python") or environ.get("PYSPARK_PYTHON") or driver_python


def prepare_horovod_spark() -> None:
    """Before horovod.spark.run in the driver: no forked build check, and Spark tasks that end with their rank."""
    from horovod.spark import runner

    skip_driver_build_check()
    if hasattr(runner, "_make_mapper") and hasattr(runner, "_task_fn"):
        runner._make_mapper = _task_mapper
    else:
        log.warning("horovod.spark.runner has no _make_mapper/_task_fn: its Spark tasks keep their 3 s wait")
