"""The docker-compose stack end to end: engine, images, `up`, a raw drop, one DAG run through the REST API (a Spark
worker container killed mid-training on request), checks of the forecast, the champion and the logs, `down -v`.

    scripts/compose_e2e.sh [--evidence FILE] [--kill-worker-during-train] [--keep]

Writes what it saw to --evidence (JSON: images, run, tasks, logs, outputs, teardown) and exits 1 when a check
fails. tests/dag/test_compose_e2e.py runs it and asserts on that evidence.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timezone
from pathlib import Path

import yaml

import images  # scripts/compose/images.py, beside this script
from airflow_rest import AirflowRest, run_path  # scripts/stack/airflow_rest.py (scripts/compose_e2e.sh's PYTHONPATH)
from checkpoint_killer import CheckpointKiller  # scripts/stack/checkpoint_killer.py
from rossmann_jobs.commit_protocol import manifest_uri

REPO = images.REPO
GEN_ENV = REPO / "docker" / "gen_env.py"   # .env.example with fresh secrets, run as users run it

DAG_ID = "rossmann_forecast"
PROJECT = "rossmann-e2e"
IMAGE_TAG = "e2e"
AS_OF = "2015-07-31"   # the last day of train.csv: the drop's test.csv is the forecast horizon
STORES = 10
# Small and fast on 2 cores (an epoch of these 10 stores takes ~1 s on 2 ranks): 12 epochs leave the killer, which
# polls S3 every 0.5 s, several seconds after the first checkpoint, and still beat the naive baseline; the gate may
# promote a model up to 25 % worse than it on 10 stores (tests/dag/stack_helpers.py, SMALL_RUN_CONF).
RUN_CONF = {"epochs": 12, "num_proc": 2, "batch_size": 64, "learning_rate": 0.001, "sample_rate": 1.0,
            "baseline_tolerance": 0.25, "season_tolerance": 1.0, "warm_start": False}
KILLED_WORKER = "spark-worker-2"
KILL_AFTER_EPOCH = 1
SCORING_TASKS = {"score_forecasts", "publish_scores"}   # skipped on a stack's first run: nothing earlier to score
STACK_READY_TIMEOUT_S = 900
RUN_TIMEOUT_S = 2700
SECRET_NAMES = ("POSTGRES_PASSWORD", "AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_FERNET_KEY", "AIRFLOW_API_SECRET_KEY",
                "AIRFLOW_JWT_SECRET", "ROSSMANN_S3_SECRET_KEY", "ROSSMANN_S3_JOBS_SECRET_KEY",
                "ROSSMANN_S3_LANDER_SECRET_KEY", "MINIO_ROOT_PASSWORD", "SPARK_AUTH_SECRET")
# What the data supplier's CLI container (the landing network: MinIO only) reaches: host:port -> outcome.
CLI_REACH_EXPECTATIONS = {"minio:9000": "reachable", "spark-master:7077": "no such host",
                          "airflow-scheduler:8793": "no such host", "airflow-api-server:8080": "no such host",
                          "postgres:5432": "no such host"}
REACH_PROBE = """import json, socket, sys
found = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        found[target] = "reachable"
    except socket.gaierror:
        found[target] = "no such host"
    except OSError as error:
        found[target] = type(error).__name__
print("REACH " + json.dumps(found))"""
# A driver on the Spark network without the secret: the master must refuse to register it.
UNAUTHENTICATED_SUBMIT = ("from pyspark.sql import SparkSession; "
                          "spark = SparkSession.builder.master('spark://spark-master:7077')"
                          ".config('spark.cores.max', '1').getOrCreate(); "
                          "print('COUNTED', spark.range(3).count())")
UNAUTHENTICATED_TIMEOUT_S = 240
# The Spark drivers' user in the Airflow image (docker/airflow/Dockerfile), and the secrets its processes may hold:
# the jobs' own S3 key only.
DRIVER_USER = "sparkjob"
DRIVER_MAY_HOLD = {"ROSSMANN_S3_JOBS_SECRET_KEY"}
DRIVER_PROCESS = re.compile(r"org\.apache\.spark\.deploy\.SparkSubmit|rossmann_jobs/\w+\.py")
# What each least-privilege identity (docker/minio/minio-init.sh) must be allowed, and refused (AccessDenied).
IDENTITY_EXPECTATIONS = {"lander put raw/": "allowed", "lander put models/": "AccessDenied",
                         "lander put runs/": "AccessDenied", "lander get models/champion.json": "AccessDenied",
                         "lander get a run's manifest": "AccessDenied", "lander list the bucket": "AccessDenied",
                         "jobs put models/": "AccessDenied", "jobs put raw/": "AccessDenied",
                         "airflow put raw/": "AccessDenied"}


def say(message: str) -> None:
    images.say(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse_env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#") and "=" in line)


class Compose:
    """docker-compose with this run's project name, .env and files; the classic builder (root .dockerignore)."""

    def __init__(self, env_file: Path, files: list[Path], variables: dict[str, str]):
        self.base = ["docker-compose", "--project-name", PROJECT, "--project-directory", str(REPO),
                     "--env-file", str(env_file)] + [arg for path in files for arg in ("-f", str(path))]
        self.env = {**os.environ, **variables, "COMPOSE_DOCKER_CLI_BUILD": "0", "DOCKER_BUILDKIT": "0"}

    def __call__(self, *args: str, timeout: float = 600, stream: bool = False, check: bool = True) -> str:
        command = [*self.base, *args]
        if stream:   # long builds: show progress as it happens
            done = subprocess.run(command, env=self.env, timeout=timeout, text=True)
            output = ""
        else:
            done = subprocess.run(command, env=self.env, timeout=timeout, text=True, capture_output=True)
            output = done.stdout + done.stderr
        if check and done.returncode:
            raise RuntimeError(f"`docker-compose {' '.join(args)}` exited {done.returncode}:\n{output[-4000:]}")
        return output

    def config(self) -> dict:
        return yaml.safe_load(self("config"))

    def container(self, service: str) -> str:
        return self("ps", "-q", service).strip()


class S3:
    """The stack's S3 through its published port, with the jobs' keys."""

    def __init__(self, endpoint: str, access_key: str, secret_key: str):
        import boto3

        self.client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                                   aws_access_key_id=access_key, aws_secret_access_key=secret_key)

    def read(self, uri: str) -> bytes:
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()

    def json(self, uri: str):
        return json.loads(self.read(uri))

    def keys(self, prefix_uri: str) -> list[str]:
        bucket, _, prefix = prefix_uri.removeprefix("s3://").partition("/")
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/")
        return sorted(f"s3://{bucket}/{entry['Key']}" for page in pages for entry in page.get("Contents", []))


class WorkerKiller(CheckpointKiller):
    """Once the run has a checkpoint of epoch >= KILL_AFTER_EPOCH, SIGKILLs a Spark worker container's main process
    from the host, as a crashed machine would; its restart policy (unless-stopped) brings it back."""

    def __init__(self, compose: Compose, s3: S3, runs_prefix: str):
        self.compose = compose
        super().__init__(s3.keys, s3.json, runs_prefix, self._worker_pid, after_epoch=KILL_AFTER_EPOCH,
                         name="worker-killer")

    def _worker_pid(self) -> list[int]:
        self.container = self.compose.container(KILLED_WORKER)
        pid = int(images.run(["docker", "inspect", "-f", "{{.State.Pid}}", self.container]).stdout.strip() or 0)
        return [pid] if pid else []

    def stop(self) -> dict:
        super().stop()
        if not self.killed_pids:
            return {"service": KILLED_WORKER, "killed": False}
        say(f"killed {KILLED_WORKER} (container {self.container[:12]}, pid {self.killed_pids[0]}) after the "
            f"checkpoint of epoch {self.pointer_epoch}")
        return {"service": KILLED_WORKER, "killed": True, "container": self.container, "pid": self.killed_pids[0],
                "pointer_epoch": self.pointer_epoch, "killed_at": self.killed_at.astimezone(timezone.utc).isoformat()}


class DriverWatch(threading.Thread):
    """While the run goes on, finds the Spark drivers among the scheduler container's processes (the SparkSubmit JVM
    and the job's Python process) and reads each one's /proc/<pid>/environ and owner from the host: which secrets'
    values are in it (names only), and whether it holds the jobs' own key (the positive control)."""

    def __init__(self, compose: Compose, secrets: dict[str, str]):
        super().__init__(name="driver-watch", daemon=True)
        self.compose, self.secrets, self.stopped = compose, secrets, threading.Event()
        self.drivers: dict[int, dict] = {}

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            try:
                self.look()
            except (OSError, RuntimeError, subprocess.SubprocessError):
                continue   # the container restarting or a process gone mid-read: the next look sees it

    def look(self) -> None:
        container = self.compose.container("airflow-scheduler")
        listing = images.run(["docker", "top", container, "-eo", "pid,args"]).stdout.splitlines()[1:]
        for line in listing:
            pid_text, _, args = line.strip().partition(" ")
            pid = int(pid_text)
            if pid in self.drivers or not DRIVER_PROCESS.search(args):
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
            uid = int(re.search(r"^Uid:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M)[1])
            self.drivers[pid] = {"uid": uid, "args": args[:160], "launcher": is_launcher(args),
                                 "secrets": sorted(name for name, value in self.secrets.items() if value in environ)}

    def stop(self) -> list[dict]:
        self.stopped.set()
        self.join(timeout=30)
        return list(self.drivers.values())


def is_launcher(args: str) -> bool:
    """Whether a process is the sudo that the image's spark-submit starts (Airflow's user, the task's child, with
    the allow-listed environment), not the driver it runs as sparkjob."""
    return Path(args.split(maxsplit=1)[0]).name == "sudo" if args.strip() else False


def probe_scheduler_environ(compose: Compose, secrets: dict[str, str]) -> dict:
    """Who in the scheduler container can read its first process's environment (the container's whole
    environment, Airflow's secrets included): the drivers' user must not; airflow can (the control)."""
    container, found = compose.container("airflow-scheduler"), {}
    for user in (DRIVER_USER, "airflow"):
        done = images.run(["docker", "exec", "-u", user, container, "cat", "/proc/1/environ"], timeout=60)
        found[user] = {"returncode": done.returncode,
                       "holds_fernet_key": secrets["AIRFLOW_FERNET_KEY"] in done.stdout}
    uid = images.run(["docker", "exec", container, "id", "-u", DRIVER_USER], timeout=60)
    found["driver_uid"] = int(uid.stdout.strip()) if uid.returncode == 0 else None
    return found


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 5.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if result := predicate():
                return result
        except OSError:   # the server is not listening yet
            pass
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def get_json(url: str, timeout: float = 10):
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def wait_for_stack(settings: dict[str, str]) -> AirflowRest:
    airflow = f"http://127.0.0.1:{settings['AIRFLOW_UI_PORT']}"
    spark = f"http://127.0.0.1:{settings['SPARK_UI_PORT']}/json/"

    def healthy():
        health = get_json(f"{airflow}/api/v2/monitor/health")
        parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
        return all((health.get(part) or {}).get("status") == "healthy" for part in parts)

    wait_until(healthy, STACK_READY_TIMEOUT_S, "Airflow's health endpoint to report every component healthy")
    wait_until(lambda: get_json(spark).get("aliveworkers") == 2, 300, "both Spark workers to register")
    api = AirflowRest(airflow, "admin", settings["AIRFLOW_ADMIN_PASSWORD"])
    api.wait_for(lambda: api.call("GET", f"/api/v2/dags/{DAG_ID}")[0] == 200, 600, "the DAG to be parsed")
    return api


def land_drop(compose: Compose, bucket: str) -> str:
    say(f"landing the generated raw drop of {AS_OF} ({STORES} stores) with the rossmann-cli service")
    compose("run", "--rm", "rossmann-cli", "python", "-m", "rossmann_jobs.synth", "land", "--out",
            f"s3://{bucket}/raw", "--from-date", AS_OF, "--to-date", AS_OF, "--stores", str(STORES), "--seed", "7",
            timeout=900)
    return f"s3://{bucket}/raw/{AS_OF}"


def probe_identities(endpoint: str, settings: dict[str, str], bucket: str, plan: dict) -> dict[str, str]:
    """Each least-privilege identity tried against the stack's MinIO after the run: "allowed" or the S3 error code.
    The objects read exist by then, so a refusal is AccessDenied, not NoSuchKey."""
    from botocore.exceptions import ClientError

    users = {name: S3(endpoint, settings[f"ROSSMANN_S3_{infix}ACCESS_KEY"], settings[f"ROSSMANN_S3_{infix}SECRET_KEY"])
             for name, infix in (("lander", "LANDER_"), ("jobs", "JOBS_"), ("airflow", ""))}

    def attempt(user: str, call: str, **kwargs) -> str:
        try:
            getattr(users[user].client, call)(Bucket=bucket, **kwargs)
            return "allowed"
        except ClientError as error:
            return error.response["Error"]["Code"]

    manifest_key = manifest_uri(plan["model"]).removeprefix(f"s3://{bucket}/")
    return {"lander put raw/": attempt("lander", "put_object", Key="raw/_identity-probe/lander", Body=b"probe"),
            "lander put models/": attempt("lander", "put_object", Key="models/_identity-probe", Body=b"probe"),
            "lander put runs/": attempt("lander", "put_object", Key="runs/_identity-probe", Body=b"probe"),
            "lander get models/champion.json": attempt("lander", "get_object", Key="models/champion.json"),
            "lander get a run's manifest": attempt("lander", "get_object", Key=manifest_key),
            "lander list the bucket": attempt("lander", "list_objects_v2", Prefix=""),
            "jobs put models/": attempt("jobs", "put_object", Key="models/_identity-probe", Body=b"probe"),
            "jobs put raw/": attempt("jobs", "put_object", Key="raw/_identity-probe/jobs", Body=b"probe"),
            "airflow put raw/": attempt("airflow", "put_object", Key="raw/_identity-probe/airflow", Body=b"probe")}


def probe_cli_reach(compose: Compose) -> dict[str, str]:
    """Which hosts the rossmann-cli container can open a TCP connection to (its networks as compose gives them)."""
    output = compose("run", "--rm", "--no-deps", "--entrypoint", "python", "rossmann-cli", "-c", REACH_PROBE,
                     *CLI_REACH_EXPECTATIONS, timeout=300)
    found = re.search(r"^REACH (\{.*\})$", output, re.M)
    return json.loads(found[1]) if found else {"unreadable": output[-2000:]}


def probe_unauthenticated_submit(compose: Compose) -> dict:
    """A PySpark driver started from the Spark image on the Spark network, without the secret: whether it counted
    anything, and what the master logged about it."""
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    command = ["docker", "run", "--rm", "--network", f"{PROJECT}_spark", "--entrypoint", "python",
               f"rossmann-spark:{IMAGE_TAG}", "-c", UNAUTHENTICATED_SUBMIT]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=UNAUTHENTICATED_TIMEOUT_S)
        returncode, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        returncode, output = None, f"{expired.stdout or ''}{expired.stderr or ''}"
    logged = images.run(["docker", "logs", "--since", since, compose.container("spark-master")])
    return {"returncode": returncode, "counted": "COUNTED" in output, "output_tail": message_lines(output),
            "master_log_tail": message_lines(logged.stdout + logged.stderr)}


def message_lines(log: str, keep: int = 40) -> str:
    """A Java log's last `keep` lines that are not stack frames (the exceptions' messages stay)."""
    frame = re.compile(r"\s*(?:at\s+)?[\w$.<>/]+\((?:[\w$.]+(?::\d+)?|Native Method|Unknown Source)\)\s*$"
                       r"|\s*\.\.\. \d+ more\s*$|\s*$")
    return "\n".join([line for line in log.splitlines() if not frame.match(line)][-keep:])


def task_instances(api: AirflowRest, path: str) -> dict[str, dict]:
    return {ti["task_id"]: ti for ti in api.call("GET", f"{path}/taskInstances")[1]["task_instances"]}


def watch_run(api: AirflowRest, path: str) -> dict:
    """Polls the run until it ends, printing each task's state changes."""
    seen: dict[str, tuple] = {}

    def finished():
        for task, ti in task_instances(api, path).items():
            state = (ti["state"], ti["try_number"])
            if seen.get(task) != state:
                seen[task] = state
                say(f"{task}: {ti['state']} (try {ti['try_number']})")
        run = api.call("GET", path)[1]
        return run if run["state"] in ("success", "failed") else None

    return api.wait_for(finished, RUN_TIMEOUT_S, "the DAG run to finish", interval_s=10)


def task_log(api: AirflowRest, path: str, task: str, try_number: int) -> str:
    status, body = api.call("GET", f"{path}/taskInstances/{task}/logs/{try_number}?full_content=true",
                            accept="application/json")
    if status != 200:
        return f"<HTTP {status}: {body}>"
    lines = body.get("content", []) if isinstance(body, dict) else [body]
    return "\n".join(line.get("event", json.dumps(line)) if isinstance(line, dict) else str(line) for line in lines)


def xcom(api: AirflowRest, path: str, task: str):
    status, body = api.call("GET", f"{path}/taskInstances/{task}/xcomEntries/return_value")
    return body["value"] if status == 200 else None


def outputs(s3: S3, plan: dict, published: dict | None) -> dict:
    """The committed forecast against the drop's test.csv, and the champion pointer."""
    test_rows = list(csv.DictReader(io.StringIO(s3.read(f"{plan['raw']}/test.csv").decode())))
    found: dict = {"test_rows": len(test_rows), "closed_ids": sorted(int(r["Id"]) for r in test_rows
                                                                     if r["Open"] == "0")}
    if published:
        rows = list(csv.DictReader(io.StringIO(s3.read(published["submission_uri"]).decode())))
        found["submission"] = {"uri": published["submission_uri"], "columns": list(rows[0]) if rows else [],
                               "sales": {int(row["Id"]): float(row["Sales"]) for row in rows}}
        found["forecast_pointer"] = s3.json(plan["forecast_pointer"])
    try:
        champion = s3.json(plan["champion"])
    except Exception:   # noqa: BLE001 - no champion yet: recorded as None, a failed check below
        champion = None
    found["champion"] = champion
    if champion:
        found["champion_files"] = s3.keys(champion["model_uri"])
    return found


def secrets_in(texts: dict[str, str], secrets: dict[str, str]) -> dict[str, list[str]]:
    """For each secret's name, the texts that contain its value (never the value itself)."""
    return {name: sorted(where for where, text in texts.items() if value and value in text)
            for name, value in secrets.items()}


def container_health(compose: Compose) -> dict[str, str]:
    """Service -> Docker's health status of its container ('none' without a health check; one-shot services too)."""
    health = {}
    for container in compose("ps", "-q").split():
        inspected = json.loads(images.run(["docker", "inspect", container]).stdout)[0]
        service = inspected["Config"]["Labels"]["com.docker.compose.service"]
        health[service] = (inspected["State"].get("Health") or {}).get("Status", "none")
    return health


def peak_memory(compose: Compose) -> dict[str, int | None]:
    """Service -> its container's peak memory in bytes (cgroup v1's max_usage_in_bytes; None where unreadable)."""
    peaks = {}
    for container in compose("ps", "-q").split():
        service = images.run(["docker", "inspect", "-f", '{{index .Config.Labels "com.docker.compose.service"}}',
                              container]).stdout.strip()
        path = Path(f"/sys/fs/cgroup/memory/docker/{container}/memory.max_usage_in_bytes")
        peaks[service] = int(path.read_text()) if path.exists() else None
    return peaks


def teardown(compose: Compose) -> dict:
    say("tearing down: docker-compose down --volumes")
    compose("down", "--volumes", "--remove-orphans", "--timeout", "30", timeout=600)
    label = f"label=com.docker.compose.project={PROJECT}"
    listings = {"containers": ["docker", "ps", "-aq"], "volumes": ["docker", "volume", "ls", "-q"],
                "networks": ["docker", "network", "ls", "-q"]}
    left = {kind: images.run([*command, "--filter", label]).stdout.split() for kind, command in listings.items()}
    return {"left": left}


def checks(evidence: dict, killed: bool) -> dict[str, str | None]:
    """The run's verdict: check name -> None (passed) or what was wrong."""
    found, tasks = evidence.get("outputs", {}), evidence.get("tasks", {})
    result: dict[str, str | None] = {}

    def check(name: str, ok: bool, detail: str) -> None:
        result[name] = None if ok else detail

    check("dag run succeeded", evidence.get("run", {}).get("state") == "success", str(evidence.get("run")))
    failed = {task: ti["state"] for task, ti in tasks.items() if task not in SCORING_TASKS and ti["state"] != "success"}
    check("every task succeeded", tasks and not failed, f"not successful: {failed}")
    sales, closed = found.get("submission", {}).get("sales", {}), set(found.get("closed_ids", []))
    check("one forecast row per test.csv row", len(sales) == found.get("test_rows", -1) > 0,
          f"{len(sales)} forecast rows for {found.get('test_rows')} test rows")
    check("open days forecast, closed days zero",
          bool(sales) and all((value == 0) == (row_id in closed) and value >= 0 for row_id, value in sales.items()),
          "a closed row with sales or an open row without")
    gate, champion = evidence.get("xcom", {}).get("quality_gate") or {}, found.get("champion") or {}
    check("the promoted model is the champion", gate.get("promoted") is True
          and champion.get("model_uri") == gate.get("champion_model_uri") and bool(found.get("champion_files")),
          f"gate {gate}, champion {champion}")
    tooling = evidence.get("image_tooling", {})
    check("the images hold no test tooling, and the probe finds each venv's own package",
          bool(tooling) and all(found[module] == (module not in images.TEST_TOOLING_MODULES)
                                for found in tooling.values() for module in found),
          f"importable per image venv: {tooling}")
    leaked = {name: where for name, where in evidence.get("secrets_found", {}).items() if where}
    check("no secret in task or container logs", not leaked, f"found: {leaked}")
    if "local" not in evidence.get("s3_server", ""):
        identities = evidence.get("identities", {})
        check("each S3 identity reaches only its prefixes", identities == IDENTITY_EXPECTATIONS,
              f"got {identities}, expected {IDENTITY_EXPECTATIONS}")
    both = set(re.findall(r"rank (\d)/2 runs in Spark executor dir \S+ \(host (\S+),",
                          "\n".join(evidence.get("logs", {}).get("train_model", []))))
    check("the two ranks ran on two worker containers", len({host for _, host in both}) >= 2, f"placements {both}")
    if killed:
        kill = evidence.get("kill", {})
        check("a worker was killed mid-training", kill.get("killed") is True, str(kill))
        check("train_model succeeded on its retry", tasks.get("train_model", {}).get("try_number") == 2,
              str(tasks.get("train_model")))
    drivers, environ = evidence.get("drivers") or [], evidence.get("scheduler_environ") or {}
    running = [driver for driver in drivers if not driver["launcher"]]
    check("the Spark drivers run as their own user and hold none of Airflow's secrets, only the jobs' key",
          len(running) >= 3 and environ.get("driver_uid") is not None
          and all(driver["uid"] == environ["driver_uid"] for driver in running)
          and all(set(driver["secrets"]) <= DRIVER_MAY_HOLD for driver in drivers)
          and any(set(driver["secrets"]) == DRIVER_MAY_HOLD for driver in running), f"{drivers}, {environ}")
    check("the drivers' user cannot read the scheduler's environment, which airflow can",
          (environ.get(DRIVER_USER) or {}).get("returncode", 0) != 0
          and (environ.get("airflow") or {}).get("holds_fernet_key") is True, str(environ))
    reach = evidence.get("cli_reach")
    check("the CLI container reaches the bucket and nothing else", reach == CLI_REACH_EXPECTATIONS,
          f"got {reach}, expected {CLI_REACH_EXPECTATIONS}")
    refused = evidence.get("unauthenticated_submit") or {}
    check("the Spark master refuses a driver without the secret",
          bool(refused) and not refused.get("counted") and refused.get("returncode") != 0
          and bool(re.search(r"(?i)sasl|authenticat", refused.get("master_log_tail", ""))), str(refused)[-1500:])
    if "teardown" in evidence:   # absent with --keep
        check("teardown left nothing", not any(evidence["teardown"]["left"].values()), str(evidence["teardown"]))
    return result


def build_stack(workdir: Path, evidence: dict, stage_wheel: bool) -> tuple[Compose, dict[str, str], Path]:
    """Base images, the S3 server's compose files, a fresh .env (mode 600) in workdir, and the stack's images built;
    records each choice and build in evidence. stage_wheel=False leaves docker/wheels/ empty: horovod compiles."""
    bases = images.base_images()
    evidence["base_images"] = images.as_records(bases)
    variables = {base.variable: base.image for base in bases}
    files = [REPO / "docker-compose.yaml"]
    minio_image = yaml.safe_load(images.COMPOSE_FILE.read_text())["services"]["minio"]["image"]
    if images.image_present(minio_image) or images.pulled(minio_image):
        evidence["s3_server"] = minio_image
    else:
        say(f"{minio_image} cannot be pulled: the local S3 server instead (docker-compose.local-s3.yaml)")
        files.append(REPO / "docker-compose.local-s3.yaml")
        evidence["s3_server"] = "local (docker-compose.local-s3.yaml)"

    settings = parse_env(subprocess.run([sys.executable, str(GEN_ENV)], capture_output=True, text=True,
                                        check=True).stdout)
    settings.update(variables)
    settings.update(COMPOSE_PROJECT_NAME=PROJECT, ROSSMANN_IMAGE_TAG=IMAGE_TAG, AIRFLOW_UI_PORT=str(free_port()),
                    SPARK_UI_PORT=str(free_port()), MINIO_API_PORT=str(free_port()),
                    MINIO_CONSOLE_PORT=str(free_port()))
    env_file = workdir / ".env"
    env_file.touch(mode=0o600)
    env_file.write_text("".join(f"{name}={value}\n" for name, value in settings.items()))
    compose = Compose(env_file, files, variables)
    config = compose.config()
    build_targets = {}
    for service, spec in config["services"].items():
        if "build" in spec and spec["image"] not in build_targets.values():
            build_targets[service] = spec["image"]
    cache = Path(os.environ.get("ROSSMANN_CACHE", Path.home() / ".cache" / "rossmann-forecast"))
    pins = images.requirement_pins(REPO / "requirements-jobs.txt")
    horovod = images.shell_assignment(REPO / "docker" / "jobs-env.sh", "HOROVOD_VERSION")
    evidence["horovod_wheel"] = images.stage_horovod_wheel(cache if stage_wheel else None, pins["tensorflow-cpu"],
                                                           horovod)
    built = images.build_images(compose, build_targets)
    evidence["images"] = images.as_records(built)
    evidence["image_tooling"] = images.image_tooling(built)

    return compose, settings, env_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evidence", type=Path, default=None, help="write what the run saw here (JSON)")
    parser.add_argument("--kill-worker-during-train", action="store_true",
                        help=f"SIGKILL {KILLED_WORKER} once training has a checkpoint; the task's retry must succeed")
    parser.add_argument("--keep", action="store_true", help="leave the stack running (no teardown)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    evidence: dict = {"as_of": AS_OF, "stores": STORES, "conf": RUN_CONF}
    workdir = Path(tempfile.mkdtemp(prefix="rossmann-compose-e2e-"))
    evidence["engine"] = images.ensure_engine(workdir.parent / "rossmann-dockerd.log")

    compose, settings, env_file = build_stack(workdir, evidence, stage_wheel=True)

    secrets = {name: settings[name] for name in SECRET_NAMES}
    try:
        say("docker-compose up")
        up_started = time.monotonic()
        compose("up", "-d", "--no-build", timeout=900)
        api = wait_for_stack(settings)
        evidence["stack_ready_s"] = round(time.monotonic() - up_started, 1)
        say(f"stack ready in {evidence['stack_ready_s']:.0f} s")
        bucket = settings["ROSSMANN_BUCKET"]
        s3 = S3(f"http://127.0.0.1:{settings['MINIO_API_PORT']}", settings["ROSSMANN_S3_ACCESS_KEY"],
                settings["ROSSMANN_S3_SECRET_KEY"])
        evidence["raw"] = land_drop(compose, bucket)

        status, body = api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
        assert status == 200, body
        status, triggered = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                                     {"logical_date": f"{AS_OF}T00:00:00Z", "conf": RUN_CONF})
        assert status == 200, triggered
        path = run_path(DAG_ID, triggered)
        say(f"triggered {triggered['dag_run_id']} through the REST API")
        run_started = time.monotonic()
        killer = WorkerKiller(compose, s3, f"s3://{bucket}/runs/{AS_OF}") if args.kill_worker_during_train else None
        watch = DriverWatch(compose, secrets)
        watch.start()
        try:
            evidence["run"] = watch_run(api, path)
        finally:
            evidence["drivers"] = watch.stop()
            if killer:
                evidence["kill"] = killer.stop()
        evidence["run_s"] = round(time.monotonic() - run_started, 1)
        say(f"the run ended {evidence['run']['state']} in {evidence['run_s']:.0f} s")

        tasks = task_instances(api, path)
        evidence["tasks"] = {task: {key: ti.get(key) for key in ("state", "try_number", "start_date", "end_date")}
                             for task, ti in tasks.items()}
        evidence["logs"] = {task: [task_log(api, path, task, n) for n in range(1, (ti["try_number"] or 0) + 1)]
                            for task, ti in tasks.items()}
        evidence["xcom"] = {task: xcom(api, path, task)
                            for task in ("plan_run", "read_train_metrics", "quality_gate", "publish_forecast")}
        evidence["outputs"] = outputs(s3, evidence["xcom"]["plan_run"], evidence["xcom"]["publish_forecast"])
        if "local" not in evidence.get("s3_server", ""):   # moto (the local stand-in) enforces no policy
            evidence["identities"] = probe_identities(f"http://127.0.0.1:{settings['MINIO_API_PORT']}", settings,
                                                      bucket, evidence["xcom"]["plan_run"])
        say("probing the networks: what the CLI container reaches, a driver without the Spark secret")
        evidence["cli_reach"] = probe_cli_reach(compose)
        evidence["unauthenticated_submit"] = probe_unauthenticated_submit(compose)
        evidence["scheduler_environ"] = probe_scheduler_environ(compose, secrets)
        evidence["health"] = container_health(compose)
        evidence["peak_memory_bytes"] = peak_memory(compose)
        evidence["spark_master"] = get_json(f"http://127.0.0.1:{settings['SPARK_UI_PORT']}/json/")
        evidence["worker_restarts"] = int(images.run(["docker", "inspect", "-f", "{{.RestartCount}}",
                                                      compose.container(KILLED_WORKER)]).stdout.strip() or -1)
        service_logs = compose("logs", "--no-color", timeout=300)
        texts = {f"{task} try {n}": log for task, logs in evidence["logs"].items() for n, log in enumerate(logs, 1)}
        texts["docker-compose logs"] = service_logs
        evidence["secrets_found"] = secrets_in(texts, secrets)
    except Exception as error:   # noqa: BLE001 - recorded, the stack's logs printed, then the teardown
        evidence["error"] = f"{type(error).__name__}: {error}"
        print(compose("logs", "--no-color", "--tail", "80", check=False, timeout=300)[-20000:], flush=True)
    finally:
        if args.keep:
            say(f"the stack keeps running: docker-compose {' '.join(compose.base[1:])} ... (.env mode 600)")
        else:
            evidence["teardown"] = teardown(compose)
            env_file.unlink(missing_ok=True)

    evidence["checks"] = checks(evidence, args.kill_worker_during_train)
    evidence["total_s"] = round(time.monotonic() - started, 1)
    if args.evidence:
        args.evidence.write_text(json.dumps(evidence, indent=1, default=str))
    for name, problem in evidence["checks"].items():
        say(f"{'ok ' if problem is None else 'FAIL'} {name}{'' if problem is None else ': ' + problem[:500]}")
    if "error" in evidence:
        say(f"error: {evidence['error']}")
    say(f"done in {evidence['total_s']:.0f} s")
    return 0 if "error" not in evidence and all(problem is None for problem in evidence["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
