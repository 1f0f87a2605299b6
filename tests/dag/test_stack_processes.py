"""The embedded stack's process checks: an exited child of ours is not mistaken for a running one; the e2e tests'
checkpoint killer kills only once the run has a checkpoint."""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from checkpoint_killer import CHECKPOINT_POINTER, CheckpointKiller
from stack_helpers import embedded


def wait_for_exit(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    # poll() would reap the child itself; the zombie must be left for the stack's own checks to find.
    while time.monotonic() < deadline and Path(f"/proc/{process.pid}/stat").read_text().split()[2] != "Z":
        time.sleep(0.05)


def test_an_exited_child_is_neither_a_live_pid_nor_a_live_group():
    for alive in (embedded.pid_alive, embedded.group_alive):
        process = subprocess.Popen(["sleep", "0.2"], start_new_session=True)
        assert alive(process.pid)
        wait_for_exit(process)
        assert not alive(process.pid)


def test_the_checkpoint_killer_kills_once_a_pointer_names_the_epoch():
    pointers: dict[str, dict] = {}
    process = subprocess.Popen(["sleep", "60"])
    killer = CheckpointKiller(lambda prefix: sorted(pointers), pointers.__getitem__, "s3://b/runs/d",
                              lambda: [process.pid], after_epoch=1, poll_s=0.02)
    try:
        pointers[f"s3://b/runs/d/r{CHECKPOINT_POINTER}"] = {"epoch": 0}
        time.sleep(0.3)
        assert process.poll() is None and killer.killed_pids == []   # epoch 0: not yet
        pointers[f"s3://b/runs/d/r{CHECKPOINT_POINTER}"] = {"epoch": 1}
        assert process.wait(timeout=10) == -9
        assert killer.killed_pids == [process.pid] and killer.pointer_epoch == 1 and killer.killed_at is not None
    finally:
        killer.stop()
        process.kill()
        process.wait()


def test_the_checkpoint_killer_records_an_epoch_checkpointed_while_it_looked_for_the_pids():
    """Looking up the pids is slow where docker inspects a container; an epoch written meanwhile is the kill's."""
    pointer = f"s3://b/runs/d/r{CHECKPOINT_POINTER}"
    pointers: dict[str, dict] = {pointer: {"epoch": 1}}
    process = subprocess.Popen(["sleep", "60"])

    def slow_lookup() -> list[int]:
        pointers[pointer] = {"epoch": 3}   # two epochs checkpointed during the lookup
        return [process.pid]
    killer = CheckpointKiller(lambda prefix: sorted(pointers), pointers.__getitem__, "s3://b/runs/d", slow_lookup,
                              after_epoch=1, poll_s=0.02)
    try:
        assert process.wait(timeout=10) == -9
        killer.stop()
        assert killer.killed_pids == [process.pid] and killer.pointer_epoch == 3
    finally:
        killer.stop()
        process.kill()
        process.wait()


def test_a_process_that_is_not_our_child_is_alive():
    assert embedded.pid_alive(1)


def test_the_embedded_s3_keeps_its_objects_across_a_stop_and_a_crash(tmp_path):
    """The demo's champion and forecasts must outlive the S3 server: a clean stop (SIGTERM) keeps every object,
    multipart ones too; a kill -9 keeps what was written more than the snapshot interval (1 s) before it."""
    import os
    import signal

    state = embedded.Stack(tmp_path)
    endpoint = embedded.start_s3(state, port=embedded.free_port())
    bucket = embedded.DEFAULT_BUCKET
    stack_s3 = StackS3(state, endpoint)
    big = os.urandom(12 * 1024 * 1024)
    stack_s3.client.put_object(Bucket=bucket, Key="models/champion.json", Body=b'{"as_of": "2015-07-31"}')
    stack_s3.upload(bucket, "runs/a/model.h5", big)   # 5 MiB parts: a multipart upload
    stack_s3.client.copy_object(Bucket=bucket, Key="forecast/latest.json",
                                CopySource={"Bucket": bucket, "Key": "models/champion.json"})
    stack_s3.client.delete_object(Bucket=bucket, Key="models/champion.json")
    try:
        embedded.stop_process(state, "moto")
        endpoint = embedded.start_s3(state, port=embedded.free_port())
        stack_s3 = StackS3(state, endpoint)
        assert stack_s3.keys(bucket) == ["forecast/latest.json", "runs/a/model.h5"]
        assert stack_s3.download(bucket, "runs/a/model.h5") == big
        assert stack_s3.client.get_object(Bucket=bucket, Key="forecast/latest.json")["Body"].read() == \
            b'{"as_of": "2015-07-31"}'

        stack_s3.client.put_object(Bucket=bucket, Key="after-restart", Body=b"x")
        time.sleep(3)   # past the snapshot interval
        os.killpg(embedded.running_pid(state, "moto"), signal.SIGKILL)
        embedded.stop_process(state, "moto")   # only waits for the killed group to be gone and forgets its pid
        endpoint = embedded.start_s3(state, port=embedded.free_port())
        assert StackS3(state, endpoint).keys(bucket) == ["after-restart", "forecast/latest.json", "runs/a/model.h5"]
    finally:
        embedded.stop_process(state, "moto")


class StackS3:
    def __init__(self, state, endpoint: str):
        import boto3

        aws = embedded.aws_env(state, endpoint)
        self.client = boto3.client("s3", endpoint_url=endpoint, region_name=aws["AWS_DEFAULT_REGION"],
                                   aws_access_key_id=aws["AWS_ACCESS_KEY_ID"],
                                   aws_secret_access_key=aws["AWS_SECRET_ACCESS_KEY"])

    def upload(self, bucket: str, key: str, data: bytes) -> None:
        import io

        from boto3.s3.transfer import TransferConfig

        self.client.upload_fileobj(io.BytesIO(data), bucket, key,
                                   Config=TransferConfig(multipart_threshold=5 * 1024 * 1024,
                                                         multipart_chunksize=5 * 1024 * 1024))

    def download(self, bucket: str, key: str) -> bytes:
        import io

        buffer = io.BytesIO()
        self.client.download_fileobj(bucket, key, buffer)
        return buffer.getvalue()

    def keys(self, bucket: str) -> list[str]:
        return sorted(item["Key"] for item in self.client.list_objects_v2(Bucket=bucket).get("Contents", []))


def test_the_stack_and_synth_commands_run_the_embedded_s3_and_land_a_drop(tmp_path):
    """The set-up's commands, not `python <file>`: rossmann-stack (.venvs/airflow) starts the S3 server, prints
    the environment and stops it; rossmann-synth (.venvs/jobs, the jobs wheel's entry point) lands a drop there
    with the AWS settings that `env --with-aws` printed."""
    import os
    import shlex

    from stack_helpers import AIRFLOW_PYTHON, JOBS_PYTHON

    stack_cmd = [str(AIRFLOW_PYTHON.parent / "rossmann-stack"), "--state-dir", str(tmp_path)]

    def run(command: list[str], env: dict[str, str] | None = None) -> str:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, f"{command}: {done.stdout}\n{done.stderr}"
        return done.stdout

    state = embedded.Stack(tmp_path)
    try:
        assert "S3 (moto) at http://127.0.0.1:" in run([*stack_cmd, "s3-start", "--port",
                                                           str(embedded.free_port())])
        exports = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1)
                       for line in run([*stack_cmd, "env", "--with-aws"]).splitlines())
        assert exports["AIRFLOW_HOME"].startswith(str(tmp_path))
        assert exports["AWS_ENDPOINT_URL"] == embedded.s3_endpoint(state)
        run([str(JOBS_PYTHON.parent / "rossmann-synth"), "land", "--out", f"s3://{exports['ROSSMANN_BUCKET']}/raw",
             "--from-date", "2015-07-31", "--to-date", "2015-07-31", "--stores", "3"], env={**os.environ, **exports})
        landed = StackS3(state, exports["AWS_ENDPOINT_URL"]).keys(exports["ROSSMANN_BUCKET"])
        assert "raw/2015-07-31/_SUCCESS" in landed and "raw/2015-07-31/train.csv" in landed
        assert re.search(r"^moto\s+running, pid \d+", run([*stack_cmd, "status"]), re.MULTILINE)
        assert run([*stack_cmd, "s3-stop"]).strip() == "moto stopped"
        assert re.search(r"^moto\s+stopped", run([*stack_cmd, "status"]), re.MULTILINE)
    finally:
        embedded.stop_process(state, "moto")


def test_the_stack_command_installs_every_stack_module_it_imports():
    """`rossmann-stack` is an editable install of named modules: a scripts/stack module that one of them imports
    but the list leaves out runs from a checkout and fails as the installed command."""
    import ast
    import tomllib

    stack_dir = Path(__file__).resolve().parents[2] / "scripts" / "stack"
    listed = set(tomllib.loads((stack_dir / "pyproject.toml").read_text())["tool"]["setuptools"]["py-modules"])
    local = {path.stem for path in stack_dir.glob("*.py")}
    imported: dict[str, str] = {}
    for name in listed:
        for node in ast.walk(ast.parse((stack_dir / f"{name}.py").read_text())):
            roots = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for root in roots:
                if root.split(".")[0] in local:
                    imported.setdefault(root.split(".")[0], name)
    missing = {module: by for module, by in imported.items() if module not in listed}
    assert not missing, f"scripts/stack/pyproject.toml py-modules lacks {missing} (module: imported by)"
