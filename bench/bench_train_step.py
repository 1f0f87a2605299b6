"""Where a training step's time goes: the model's compute vs Horovod's allreduce, on this machine's cores.

    PYTHONPATH=. .venvs/jobs/bin/python bench/bench_train_step.py [--steps 300] [--batch-size 512]

Times the train job's own step (rossmann_jobs/training/worker.py `_make_steps`: forward, backward, the legacy Adam
update and the metric sums, with the default TrainParams) on random rows of a 30-store drop's vocabulary sizes:
- compute only: the same step with the gradient tape left as it is (no allreduce), in one process, then in two
  processes at once (the two ranks' share of the 2 cores, without their communication);
- the job's step in 2 Horovod ranks (`horovodrun --gloo`, loopback, one intra/inter-op thread each as the job
  pins them): one allreduce of the concatenated dense gradients (the job's), and each variable's gradient
  allreduced on its own (hvd.DistributedGradientTape with sparse_as_dense, the job's step before session 22,
  written out here as the baseline);
- one allreduce alone per step, of 10 floats and of the model's gradient size.
Writes bench/out/train_step.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out" / "train_step.json"
WARMUP_STEPS = 20
# A 30-store drop's vocabulary sizes (index 0 = unknown), as prepare encodes them.
VOCAB_30_STORES = {"Store": 31, "State": 13, "DayOfWeek": 8, "Year": 5, "Month": 13, "Day": 32, "Week": 54,
                   "CompetitionMonthsOpen": 26, "Promo2Weeks": 27, "StoreType": 5, "Assortment": 4,
                   "PromoInterval": 5, "CompetitionOpenSinceYear": 20, "Promo2SinceYear": 9, "Events": 22,
                   "Promo": 3, "StateHoliday": 5, "SchoolHoliday": 3}


def worker(mode: str, steps: int, batch_size: int) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    from rossmann_jobs.features.spec import CATEGORICAL_COLS, FEATURE_COLS
    from rossmann_jobs.model.architecture import build_model
    from rossmann_jobs.model.params import TrainParams
    from rossmann_jobs.training.optimizer import make_optimizer
    from rossmann_jobs.training.worker import _make_steps
    from testkit.horovod_steps import NoAllreduce, per_variable_train_step

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd, rank = NoAllreduce(), 0
    if mode != "compute":
        import horovod.tensorflow as hvd
        hvd.init()
        rank = hvd.rank()
    rng = np.random.default_rng(rank)
    features = [tf.constant(rng.integers(0, VOCAB_30_STORES[c], (batch_size, 1)), tf.int32)
                if c in CATEGORICAL_COLS else tf.constant(rng.normal(size=(batch_size, 1)), tf.float32)
                for c in FEATURE_COLS]
    labels = tf.constant(rng.normal(8.5, 0.3, (batch_size, 1)), tf.float32)
    params = TrainParams()
    model = build_model(VOCAB_30_STORES, 40000.0, params)
    gradient_floats = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    if mode.startswith("allreduce"):
        vector = tf.ones([10 if mode == "allreduce-10" else gradient_floats])
        allreduce = tf.function(lambda x: hvd.allreduce(x, op=hvd.Average))

        def run():
            return allreduce(vector)
    elif mode == "step-per-variable":
        train_step = per_variable_train_step(tf, hvd, model, make_optimizer(params, model.trainable_variables))
    else:
        train_step, _, _ = _make_steps(tf, hvd, model, make_optimizer(params, model.trainable_variables), params)
    if not mode.startswith("allreduce"):
        def run():
            return train_step(features, labels)
    for _ in range(WARMUP_STEPS):
        run()
    started = time.perf_counter()
    for _ in range(steps):
        run()
    if mode != "compute":
        hvd.allreduce(tf.constant(0.0))   # every rank done
    seconds = time.perf_counter() - started
    return {"mode": mode, "rank": rank, "ms_per_step": round(seconds / steps * 1000, 2),
            "gradient_floats": gradient_floats}


def _results(output: str) -> list[dict]:
    found = []
    for line in output.splitlines():
        start = line.find('{"mode"')
        if start >= 0:
            found.append(json.loads(line[start:]))
    return found


def run_config(name: str, mode: str, processes: int, horovod: bool, args) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, __file__, "--worker", mode, "--steps", str(args.steps), "--batch-size",
               str(args.batch_size)]
    if horovod:
        horovodrun = str(Path(sys.executable).parent / "horovodrun")
        command = [horovodrun, "--gloo", "-np", str(processes), "-H", f"localhost:{processes}",
                   "--network-interface", "lo", *command]
        outputs = [subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)]
    else:
        running = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
                   for _ in range(processes)]
        outputs = [subprocess.CompletedProcess(p.args, p.wait(timeout=600), p.stdout.read(), "") for p in running]
    found = [r for done in outputs for r in _results(done.stdout + (done.stderr or ""))]
    if len(found) != processes:
        raise SystemExit(f"{name}: expected {processes} results, got {found}:\n"
                         + "\n".join((d.stdout + (d.stderr or ""))[-3000:] for d in outputs))
    return {"config": name, "processes": processes, "horovod": horovod,
            "ms_per_step": max(r["ms_per_step"] for r in found), "per_process": found}


CONFIGS = [
    ("the step's compute, 1 process", "compute", 1, False),
    ("the step's compute, 2 processes at once", "compute", 2, False),
    ("the job's step, 2 Horovod ranks: one allreduce of all the gradients", "step", 2, True),
    ("before: each variable's gradient allreduced on its own, 2 ranks", "step-per-variable", 2, True),
    ("one allreduce of 10 floats, 2 ranks", "allreduce-10", 2, True),
    ("one allreduce of the gradient's size, 2 ranks", "allreduce-gradient", 2, True),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, args.batch_size)), flush=True)
        return
    rows = [run_config(name, mode, processes, horovod, args) for name, mode, processes, horovod in CONFIGS]
    report = {"benchmark": "train_step", "steps": args.steps, "batch_size": args.batch_size, "results": rows,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "load_average": [round(x, 2) for x in os.getloadavg()]},
              "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"| configuration (batch {args.batch_size} per process, {args.steps} steps) | ms per step (slowest "
          "process) |\n|---|---:|")
    for row in rows:
        print(f"| {row['config']} | {row['ms_per_step']:.2f} |")
    print(f"gradient floats: {rows[-1]['per_process'][0]['gradient_floats']}; JSON: {args.out}")


if __name__ == "__main__":
    main()
