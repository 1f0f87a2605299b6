"""Where a daily run's time goes, per job: JVM and session start, each step, Spark jobs/stages/tasks, bytes moved.

For each store count and storage (local files, or S3 on a moto server behind a byte-counting proxy), lands the
realistic drop for as-of D (default 2015-07-31; generated once per work dir like bench_robustness.py) and runs the
three jobs the way the DAG does (spark-submit, local[2], the DAG's default training params but --epochs), each with
Spark's event log on. Records per job: wall time, CPU seconds of the job's whole process tree (sampled: TreeCpu
below), seconds from launch to a running SparkSession ("session start": JVM, Python, py4j), the job's
own step timings (its summary), Spark's jobs, stages and tasks, bytes read and written by Spark tasks and
shuffled, and through S3 (both directions at the proxy: Spark, the Horovod ranks' pyarrow reads, the driver's small
files). Merges the results per
(label, stores, storage) into bench/out/fixed_cost.json and prints a table of every result in it.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=. .venvs/jobs/bin/python bench/bench_fixed_cost.py --stores 30,1115 \
        [--storage local,s3] [--label after] [--repo PATH] [--epochs 10] [--launch-conf KEY=VALUE ...] \
        [--workdir DIR] [--jobs prepare,train,predict] [--standalone-cluster]

Before/after on one machine: `git worktree add /tmp/before <commit>`, run with `--repo /tmp/before --label before`,
then without --repo as `--label after`, back to back. --launch-conf adds spark-submit --conf settings on top of
the DAG's (rossmann_jobs/launch_settings.py, as the DAG derives them from the drop's size, unless --no-derived).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import re
import resource
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import bench_robustness as robustness  # bench/, this script's folder
import psutil
from bench_forecast_truth import REPO

from rossmann_jobs import storage
from rossmann_jobs.synth.cli import generate, land
from rossmann_jobs.synth.scenarios import scenario_config


class TreeCpu:
    """CPU seconds of a process and every descendant, sampled from /proc: getrusage misses the processes nobody waits
    for (a job's Python workers, forked by PySpark's daemon and killed at exit, and Horovod's ranks are never reaped
    by the process the bench waits for, so RUSAGE_CHILDREN leaves their CPU out). Reads each descendant's user +
    system time every `interval` seconds and keeps each process's last reading: it misses at most one interval of each
    process's CPU. Start with the root pid; stop() returns the CPU seconds of the root and all its descendants seen."""

    def __init__(self, pid: int, interval: float = 0.25):
        self._root, self._interval = psutil.Process(pid), interval
        self._seen: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        try:
            processes = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return
        for process in processes:
            try:
                times = process.cpu_times()
                self._seen[(process.pid, process.create_time())] = times.user + times.system
            except psutil.Error:   # exited between listing and reading
                continue

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def stop(self) -> float:
        self._sample()
        self._stop.set()
        self._thread.join()
        return round(sum(self._seen.values()), 1)


JOBS = ("prepare", "train", "predict")
SESSION_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO \[rossmann\] Spark \S+ master=", re.M)


class CountingProxy:
    """TCP proxy in front of the S3 server that counts the bytes each way: what a job moves through S3."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.sent_to_s3 = self.received_from_s3 = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._server.accept()
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, to_s3: bool) -> None:
        try:
            while chunk := source.recv(1 << 16):
                target.sendall(chunk)
                with self._lock:
                    if to_s3:
                        self.sent_to_s3 += len(chunk)
                    else:
                        self.received_from_s3 += len(chunk)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.sent_to_s3, self.received_from_s3


@contextlib.contextmanager
def s3_endpoint():
    """A moto S3 server behind a CountingProxy; the AWS_* variables the jobs read point at the proxy."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    proxy = CountingProxy(port)
    saved = dict(os.environ)
    os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{proxy.port}", AWS_ACCESS_KEY_ID="bench-key-id",
                      AWS_SECRET_ACCESS_KEY="bench-secret", AWS_DEFAULT_REGION="us-east-1")
    try:
        yield proxy
    finally:
        os.environ.clear()
        os.environ.update(saved)
        server.stop()


def upload(local_dir: Path, uri: str) -> None:
    for path in sorted(local_dir.rglob("*")):
        if path.is_file():
            storage.write_bytes(storage.join(uri, str(path.relative_to(local_dir))), path.read_bytes())


def event_log_counts(event_dir: Path, before: set[str]) -> dict:
    """Spark jobs, stages, tasks and bytes of the one application whose event log appeared in event_dir."""
    new = [path for path in event_dir.iterdir() if path.name not in before]
    if len(new) != 1:
        return {}
    counts = {"spark_jobs": 0, "stages": 0, "tasks": 0, "input_bytes": 0, "output_bytes": 0,
              "shuffle_read_bytes": 0, "shuffle_write_bytes": 0}
    for line in new[0].open():
        event = json.loads(line)
        kind = event["Event"]
        if kind == "SparkListenerJobStart":
            counts["spark_jobs"] += 1
        elif kind == "SparkListenerStageCompleted":
            counts["stages"] += 1
        elif kind == "SparkListenerTaskEnd":
            counts["tasks"] += 1
            task = event.get("Task Metrics") or {}
            counts["input_bytes"] += (task.get("Input Metrics") or {}).get("Bytes Read", 0)
            counts["output_bytes"] += (task.get("Output Metrics") or {}).get("Bytes Written", 0)
            counts["shuffle_read_bytes"] += sum((task.get("Shuffle Read Metrics") or {}).get(key, 0)
                                                for key in ("Remote Bytes Read", "Local Bytes Read"))
            counts["shuffle_write_bytes"] += (task.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0)
    return counts


def session_start_s(log_text: str, launched: float) -> float | None:
    match = SESSION_LINE.search(log_text)
    if not match:
        return None
    ready = dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return round(ready - launched, 2)


def job_steps(job: str, out: str) -> dict:
    """The job's own step timings, from what it committed."""
    manifest = storage.read_json(storage.join(out, storage.MANIFEST_NAME))
    attempt = storage.committed_uri(out)
    if job == "prepare":
        return storage.read_json(storage.join(attempt, "metadata.json")).get("timings_s", {})
    if job == "train":
        return storage.read_json(storage.join(attempt, "metrics.json")).get("timings_seconds", {})
    return manifest.get("summary", {}).get("timings_s", {})


def run_job(job: str, args: list[str], out: str, work: Path, repo: Path, launch_conf: dict[str, str],
            proxy: CountingProxy | None, master: str = "local[2]") -> dict:
    """spark-submit one job as the DAG does; everything this bench records about it."""
    event_dir = work / "events"
    event_dir.mkdir(parents=True, exist_ok=True)
    before = {path.name for path in event_dir.iterdir()}
    conf = {"spark.ui.enabled": "false", "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(event_dir),
            **launch_conf}
    jobs_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{jobs_bin}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(repo)}
    command = [str(jobs_bin / "spark-submit"), "--master", master, "--driver-memory", "2g"]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += [str(repo / "rossmann_jobs" / f"{job}.py"), *args]
    log_path = work / f"{job}.log"
    robustness.log(f"{job}: {' '.join(args)}")
    bytes_before = proxy.counts() if proxy else (0, 0)
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    launched = time.time()
    started = time.perf_counter()
    with open(log_path, "w") as output:
        process = subprocess.Popen(command, env=env, cwd=repo, stdout=output, stderr=subprocess.STDOUT)
        tree = TreeCpu(process.pid)
        code = process.wait()
        tree_cpu = tree.stop()
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        sys.exit(f"{job} failed (exit {code}); log: {log_path}\n{log_path.read_text()[-3000:]}")
    bytes_after = proxy.counts() if proxy else (0, 0)
    record = {"wall_s": round(wall, 2),
              "cpu_s": max(tree_cpu, round(cpu_after.ru_utime - cpu_before.ru_utime
                                           + cpu_after.ru_stime - cpu_before.ru_stime, 1)),
              "session_start_s": session_start_s(log_path.read_text(), launched),
              "steps_s": job_steps(job, out), **event_log_counts(event_dir, before)}
    if proxy:
        record["s3_bytes_sent"] = bytes_after[0] - bytes_before[0]
        record["s3_bytes_received"] = bytes_after[1] - bytes_before[1]
    return record


def derived_launch_conf(repo: Path, job: str, drop_dir: Path) -> dict[str, str]:
    """The launch settings the DAG derives for this job from the drop's manifest (none for a checkout without
    rossmann_jobs/launch_settings.py: the settings before it existed)."""
    if not (repo / "rossmann_jobs" / "launch_settings.py").exists():
        return {}
    from rossmann_jobs import launch_settings

    manifest = json.loads((drop_dir / "_SUCCESS").read_text() or "{}")
    return launch_settings.launch_conf(job, launch_settings.drop_rows(manifest))


@contextlib.contextmanager
def standalone_cluster(state_dir: Path):
    """(master URL, its job settings): a Spark standalone master and two 1-core workers on 127.0.0.1
    (scripts/stack), whose executors run the jobs venv's Python (this machine's, as the DAG's connection names
    it), stopped afterwards."""
    sys.path.insert(0, str(REPO / "scripts" / "stack"))
    import stack as embedded

    cluster = embedded.Stack(state_dir)
    with embedded.running_spark_cluster(cluster, workers=2, cores=1, memory="2g") as master:
        yield master, {**embedded.spark_cluster_conf(cluster),
                       "spark.pyspark.python": str(Path(sys.executable).parent / "python")}


def run_cell(stores: int, storage_kind: str, args: argparse.Namespace) -> dict:
    work = Path(args.workdir) / f"baseline-{stores}"
    config = scenario_config("baseline", stores, args.seed)
    drop_dir = work / "drops" / args.as_of.isoformat()
    if not (drop_dir / "_SUCCESS").exists():   # the same work dir as bench_robustness.py's: its drops are reused
        robustness.log(f"{stores} stores: generate and land the drop for {args.as_of}")
        generate(str(work / "full"), config)
        land(str(work / "drops"), args.as_of, args.as_of, config)
    cell = work / "fixed-cost" / args.label / storage_kind
    cell.mkdir(parents=True, exist_ok=True)
    with (s3_endpoint() if storage_kind == "s3" else contextlib.nullcontext()) as proxy:
        if proxy:
            bucket = f"bench-{uuid.uuid4().hex[:8]}"
            import boto3

            boto3.client("s3").create_bucket(Bucket=bucket)
            root = f"s3://{bucket}"
            raw = f"{root}/raw/{args.as_of.isoformat()}"
            upload(drop_dir, raw)
        else:
            root, raw = str(cell / "out"), str(drop_dir)
            storage.delete_prefix(root)
        # The jobs load models only from their storage root's runs/ and models/ (rossmann_jobs/model/trust.py).
        os.environ["ROSSMANN_STORAGE_ROOT"] = root
        features, model, predictions = (f"{root}/features", f"{root}/runs/model", f"{root}/runs/predictions")
        job_args = {"prepare": ["--raw", raw, "--out", features, "--as-of", args.as_of.isoformat()],
                    "train": ["--features", features, "--out", model, "--num-proc", "2", "--epochs",
                              str(args.epochs)],
                    "predict": ["--model", model, "--features", features, "--raw", raw, "--out", predictions]}
        outs = {"prepare": features, "train": model, "predict": predictions}
        jobs = {}
        with standalone_cluster(work / "cluster") if args.standalone_cluster else contextlib.nullcontext() as cluster:
            master, cluster_conf = cluster or ("local[2]", {})
            for job in args.jobs:
                launch = {} if not args.derived else derived_launch_conf(args.repo, job, drop_dir)
                launch.update(args.launch_conf)
                jobs[job] = {"launch_conf": launch,
                             **run_job(job, job_args[job], outs[job], cell, args.repo, {**cluster_conf, **launch},
                                       proxy, master)}
    return {"label": args.label, "stores": stores, "storage": storage_kind, "as_of": args.as_of.isoformat(),
            "master": "standalone cluster, 2 workers of 1 core" if args.standalone_cluster else "local[2]",
            "epochs": args.epochs, "train_rows": json.loads((drop_dir / "_SUCCESS").read_text())["files"]
            ["train.csv"]["rows"], "jobs": jobs, "total_wall_s": round(sum(j["wall_s"] for j in jobs.values()), 1),
            "total_cpu_s": round(sum(j["cpu_s"] for j in jobs.values()), 1),
            "benchmarked": robustness.git_state(args.repo), "machine": robustness.machine(),
            "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat()}


def print_table(results: dict) -> None:
    print("| label | stores | storage | job | wall s | CPU s | session start s | Spark jobs | stages | tasks | "
          "S3 MB in/out | slowest steps (s) |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for key in sorted(results):
        result = results[key]
        for job, record in result["jobs"].items():
            steps = sorted(((v, k) for k, v in record["steps_s"].items() if isinstance(v, (int, float))
                            and k != job), reverse=True)[:3]
            s3 = (f"{record['s3_bytes_received'] / 1e6:.1f}/{record['s3_bytes_sent'] / 1e6:.1f}"
                  if "s3_bytes_sent" in record else "")
            print(f"| {result['label']} | {result['stores']} | {result['storage']} | {job} | {record['wall_s']:.1f} | "
                  f"{record['cpu_s']:.1f} | {record.get('session_start_s')} | {record.get('spark_jobs')} | "
                  f"{record.get('stages')} | {record.get('tasks')} | {s3} | "
                  + "; ".join(f"{name[:38]} {value:.1f}" for value, name in steps) + " |")
        print(f"| {result['label']} | {result['stores']} | {result['storage']} | **all three** | "
              f"**{result['total_wall_s']:.1f}** | **{result['total_cpu_s']:.1f}** | | | | | | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="30", help="comma-separated store counts")
    parser.add_argument("--storage", default="local", help="comma-separated, of local and s3")
    parser.add_argument("--as-of", type=dt.date.fromisoformat, default=dt.date(2015, 7, 31))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=10, help="the demo's 10 by default")
    parser.add_argument("--jobs", default=",".join(JOBS), type=lambda value: value.split(","))
    parser.add_argument("--label", default="after")
    parser.add_argument("--repo", type=Path, default=REPO, help="checkout whose jobs run (default: this one)")
    parser.add_argument("--launch-conf", action="append", default=[], help="KEY=VALUE for spark-submit --conf")
    parser.add_argument("--no-derived", dest="derived", action="store_false",
                        help="do not add the launch settings the DAG derives from the drop")
    parser.add_argument("--standalone-cluster", action="store_true",
                        help="run the jobs on a Spark standalone cluster of two 1-core workers started here")
    parser.add_argument("--workdir", default="/tmp/rossmann-fixed-cost")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    args = parser.parse_args()
    args.launch_conf = dict(item.split("=", 1) for item in args.launch_conf)
    args.repo = args.repo.resolve()

    out_file = args.out / "fixed_cost.json"
    args.out.mkdir(parents=True, exist_ok=True)
    document = json.loads(out_file.read_text()) if out_file.exists() else {"benchmark": "fixed_cost", "results": {}}
    for stores in (int(value) for value in args.stores.split(",")):
        for storage_kind in args.storage.split(","):
            result = run_cell(stores, storage_kind, args)
            document["results"][f"{args.label}/{stores}/{storage_kind}"] = result
            document["updated_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
            out_file.write_text(json.dumps(document, indent=1))
    print_table(document["results"])
    print(f"\nmachine: {platform.platform()}, {os.cpu_count()} CPUs; JSON: {out_file}")


if __name__ == "__main__":
    main()
