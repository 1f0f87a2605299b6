"""Benchmark: training throughput of model.fit + hvd.DistributedOptimizer vs a DistributedGradientTape loop.

All variants run inside one horovod.spark.run (so process start-up is paid once) on the reference model, with the
same per-rank batch size, first from in-memory batches (isolates the training step) and then the job's real input
(Parquet shard streamed by rossmann_jobs.training.shard_input). Writes bench/out/train_bench_np<N>[_cluster][_job].json
and prints a table.

    PATH=.venvs/jobs/bin:$PATH PYTHONPATH=.:scripts/stack spark-submit --master 'local[2]' bench/bench_train.py \\
        [--rounds 5] [--steps 15] [--num-proc 2] [--job-variant-only] [--standalone-cluster]

--standalone-cluster starts a Spark standalone master with --num-proc 1-core workers on 127.0.0.1 (the same as
`scripts/stack/stack.py spark-start`, in a temporary state dir), runs on it, and stops it.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import stack as embedded  # scripts/stack/stack.py, on PYTHONPATH
from rossmann_jobs.model.params import TrainParams
from rossmann_jobs.spark_session import build_spark_session
from rossmann_jobs.training.feature_set import load_feature_set, scan_files
from testkit.feature_fixtures import VOCAB_SIZES, write_features

REPO_ROOT = Path(__file__).resolve().parents[1]

OUT_DIR = REPO_ROOT / "bench" / "out"


JOB_VARIANT = "tape + legacy Adam, Parquet stream (the job)"


def bench_fn(train_units, max_sales, batch_size, steps, warmup_steps, rounds, job_variant_only=False):
    """Runs on every rank; returns {variant: [(seconds, data wait seconds) per round]} measured on this rank.

    Every variant is built and warmed up (traced) first; then the rounds interleave the variants so that load
    changes on the machine hit all of them alike.
    """
    import horovod.tensorflow as hvd_tf
    import horovod.tensorflow.keras as hvd_keras
    import numpy as np
    import tensorflow as tf

    from rossmann_jobs.features.spec import FEATURE_COLS, LABEL_COL
    from rossmann_jobs.model.architecture import build_model
    from rossmann_jobs.training.feature_set import rank_units
    from rossmann_jobs.training.shard_input import eval_chunks, train_dataset

    hvd_keras.init()
    threads = max(1, (os.cpu_count() or 1) // hvd_keras.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    params = TrainParams(batch_size=batch_size)
    units = rank_units(train_units, hvd_keras.rank(), hvd_keras.size())
    columns = {}
    for chunk in eval_chunks(units, 65_536):
        for name, values in chunk.items():
            columns.setdefault(name, []).append(values)
    columns = {name: np.concatenate(parts) for name, parts in columns.items()}
    in_memory = (tf.data.Dataset.from_tensor_slices(({c: columns[c] for c in FEATURE_COLS}, columns[LABEL_COL]))
                 .repeat().batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE))
    streamed = train_dataset(units, batch_size, (warmup_steps + steps) * rounds, [1], params.seed,
                             hvd_keras.rank(), params.shuffle_buffer_rows)

    def adam(legacy):
        factory = tf.keras.optimizers.legacy.Adam if legacy else tf.keras.optimizers.Adam
        return factory(params.learning_rate, epsilon=params.adam_epsilon)

    def fresh_model():
        tf.keras.utils.set_random_seed(0)
        return build_model(VOCAB_SIZES, max_sales, params)

    def fit_variant(legacy):
        model = fresh_model()
        model.compile(hvd_keras.DistributedOptimizer(adam(legacy), sparse_as_dense=True), "mae")
        model.fit(in_memory, steps_per_epoch=warmup_steps, epochs=1, verbose=0,
                  callbacks=[hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0)])

        def run():
            started = time.perf_counter()
            model.fit(in_memory, steps_per_epoch=steps, epochs=1, verbose=0,
                      callbacks=[hvd_keras.callbacks.MetricAverageCallback()])
            return time.perf_counter() - started, 0.0
        return run

    def tape_variant(dataset, legacy):
        model = fresh_model()
        optimizer = adam(legacy)
        hvd_tf.broadcast_variables(model.variables, 0)

        @tf.function
        def step(features, labels):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.abs(labels - model(features, training=True))) + tf.add_n(model.losses)
            tape = hvd_tf.DistributedGradientTape(tape, sparse_as_dense=True)
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

        iterator = iter(dataset)
        for _ in range(warmup_steps):
            step(*next(iterator))

        def run():
            wait = 0.0
            started = time.perf_counter()
            for _ in range(steps):
                before = time.perf_counter()
                batch = next(iterator)
                wait += time.perf_counter() - before
                step(*batch)
            return time.perf_counter() - started, wait
        return run

    variants = {
        "fit + DistributedOptimizer(Adam)": lambda: fit_variant(legacy=False),
        "fit + DistributedOptimizer(legacy Adam)": lambda: fit_variant(legacy=True),
        "tape + Adam": lambda: tape_variant(in_memory, legacy=False),
        "tape + legacy Adam": lambda: tape_variant(in_memory, legacy=True),
        JOB_VARIANT: lambda: tape_variant(streamed, legacy=True),
    }
    if job_variant_only:
        variants = {JOB_VARIANT: variants[JOB_VARIANT]}
    runners, results = {}, {}
    for name, prepare in variants.items():
        try:
            runners[name] = prepare()
            results[name] = []
        except Exception as error:  # a variant that does not work on this stack is a result too
            results[name] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
    for _ in range(rounds):
        for name, run in runners.items():
            results[name].append(run())
    return {"rank": hvd_keras.rank(), "size": hvd_keras.size(), "results": results}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15, help="timed steps per variant and round")
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--batch-size", type=int, default=TrainParams().batch_size)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--job-variant-only", action="store_true", help=f"time only '{JOB_VARIANT}'")
    parser.add_argument("--standalone-cluster", action="store_true",
                        help="run on a Spark standalone cluster of --num-proc 1-core workers started here")
    args = parser.parse_args()

    import horovod.spark

    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        cluster = embedded.Stack(Path(tmp) / "cluster") if args.standalone_cluster else None
        with (embedded.running_spark_cluster(cluster, workers=args.num_proc, cores=1, memory="2g") if cluster
              else contextlib.nullcontext()) as cluster_master:
            extra_conf = {"spark.master": cluster_master, **embedded.spark_cluster_conf(cluster)} if cluster else None
            spark = build_spark_session("rossmann-bench-train", extra_conf)
            master = spark.sparkContext.master
            load_before = os.getloadavg()
            write_features(f"{tmp}/features", train_rows=args.rows, validation_rows=1000,
                           num_shards=2 * args.num_proc)
            features = load_feature_set(f"{tmp}/features")
            units = scan_files(features.train_files, features.vocab_sizes)
            started = time.perf_counter()
            per_rank = horovod.spark.run(bench_fn, args=(units, features.max_sales, args.batch_size, args.steps,
                                                         args.warmup_steps, args.rounds, args.job_variant_only),
                                         num_proc=args.num_proc, stdout=sys.stdout, stderr=sys.stderr,
                                         prefix_output_with_timestamp=True)
            wall = time.perf_counter() - started
            spark.stop()

    rows = [summarise(name, [rank["results"][name] for rank in per_rank], args)
            for name in per_rank[0]["results"]]
    document = {"benchmark": "train step variants", "spark_master": master, "num_proc": args.num_proc,
                "batch_size_per_rank": args.batch_size,
                "steps_per_round": args.steps, "rounds": args.rounds, "warmup_steps": args.warmup_steps,
                "train_rows": args.rows, "horovod_run_wall_seconds": round(wall, 1),
                "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                            "python": platform.python_version(), "load_average_1_5_15_before": load_before,
                            "load_average_1_5_15_after": os.getloadavg()},
                "results": rows}
    suffix = ("_cluster" if cluster else "") + ("_job" if args.job_variant_only else "")
    out = OUT_DIR / f"train_bench_np{args.num_proc}{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2))
    print(f"\n{'variant':46} {'samples/s best':>14} {'median':>7} {'ms/step best':>12} {'data wait':>9}")
    for row in rows:
        if "error" in row:
            print(f"{row['variant']:46} ERROR {row['error']}")
        else:
            print(f"{row['variant']:46} {row['samples_per_second_best']:>14} {row['samples_per_second_median']:>7} "
                  f"{row['ms_per_step_best']:>12} {row['data_wait_share_median']:>9.1%}")
    print(f"({args.num_proc} ranks on {master}, batch {args.batch_size}/rank, {args.rounds} rounds x {args.steps} "
          f"steps; "
          f"load average {load_before[0]:.1f} before; horovod.spark.run wall time {wall:.0f} s; JSON: {out})")


def summarise(name: str, per_rank: list, args: argparse.Namespace) -> dict:
    """Per round the slowest rank's time (ranks wait for each other at every allreduce); best and median round.

    On a shared machine, load only ever adds time, so the best round is the closest to the variant's own cost.
    """
    if isinstance(per_rank[0], dict):
        return {"variant": name, **per_rank[0]}
    seconds = [max(rank[round_][0] for rank in per_rank) for round_ in range(args.rounds)]
    waits = [sum(rank[round_][1] for rank in per_rank) / len(per_rank) for round_ in range(args.rounds)]
    samples = args.steps * args.batch_size * args.num_proc
    return {"variant": name, "seconds_per_round": [round(s, 2) for s in seconds],
            "samples_per_second_best": round(samples / min(seconds)),
            "samples_per_second_median": round(samples / statistics.median(seconds)),
            "ms_per_step_best": round(1000 * min(seconds) / args.steps, 1),
            "data_wait_share_median": round(statistics.median(w / s for w, s in zip(waits, seconds)), 4)}


if __name__ == "__main__":
    main()
