"""Train job: data-parallel training of the Rossmann model with horovod.spark.run, committing the model artifact.

spark-submit rossmann_jobs/train.py --features URI --out URI [--num-proc N] [--epochs E] [--batch-size B]
    [--learning-rate LR] [--lr-schedule cosine|plateau] [--warmup-epochs W] [--resume/--no-resume]
    [--hidden-units 256,128] [--embedding-dim 10] [--champion-model URI]
    [--warm-start-model URI [--warm-start-epochs N]]

Each Horovod rank streams its own Parquet shard from the store; nothing is collected to the driver. Rank 0 writes a
checkpoint to <out>/checkpoints/ every epoch; a re-run of the same --out resumes from it (unless --no-resume).
After training, the driver scores the committed model, the --champion-model (if any) and the naive seasonal baseline
on the validation rows (gate_scores.py): metrics.json `gate_scores`, the quality gate's input.
--warm-start-model (the champion as of D, in the DAG) starts a fresh run from that model's weights, embeddings
re-indexed to today's vocabularies (training/warm_start.py), and fine-tunes for --warm-start-epochs; an incompatible
model means a cold start of --epochs, logged and recorded in metrics.json `warm_start`.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from datetime import date
from typing import Any

from rossmann_jobs import storage
from rossmann_jobs.gate_scores import gate_scores
from rossmann_jobs.job_runner import run_job, timed
from rossmann_jobs.model.files import read_weights
from rossmann_jobs.model.files import write_model as write_model_files
from rossmann_jobs.model.params import LR_SCHEDULES, TrainParams
from rossmann_jobs.model.store import ModelSource
from rossmann_jobs.model.trust import DIGESTS_KEY, ModelRefusedError, sha256_hex
from rossmann_jobs.output_layout import TRAIN_METRICS_FILE, TRAINING_CURVES_FILE
from rossmann_jobs.training import checkpoint, network, season_backtest, train_outputs
from rossmann_jobs.training.feature_set import FeatureDataError, FeatureSet, load_feature_set, scan_files
from rossmann_jobs.training.horovod_launch import prepare_horovod_spark, rank_python
from rossmann_jobs.training.prepared_files import train_statistics
from rossmann_jobs.training.warm_start import WarmStart, plan_warm_start
from rossmann_jobs.training.worker import WorkerConfig, train_fn

log = logging.getLogger("rossmann.train")

BACKTEST_FEATURES_DIR = "season_backtest_features"   # beside checkpoints/, outside the attempts: a retry rewrites it

# A dead or stuck rank must fail the job, not hang it; each can be overridden from the environment.
WORKER_TIMEOUT_ENV = {
    "HOROVOD_GLOO_TIMEOUT_SECONDS": "120",          # rendezvous / connecting to peers
    "HOROVOD_STALL_CHECK_TIME_SECONDS": "120",      # warn when ranks stop submitting the same collectives
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "900",   # ... and shut down Horovod when that lasts this long
}
DEFAULT_START_TIMEOUT_S = 300


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    defaults = TrainParams()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features", required=True, help="URI of the prepare job's output")
    parser.add_argument("--out", required=True, help="URI of this run's training output")
    parser.add_argument("--num-proc", type=int, help="Horovod processes (default: the executors' task slots)")
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="per rank")
    parser.add_argument("--min-steps-per-epoch", type=int, default=defaults.min_steps_per_epoch,
                        help="steps of an epoch when one pass over the largest shard takes fewer (small data sets)")
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate,
                        help="per rank; warmed up to learning rate x Horovod size")
    parser.add_argument("--lr-schedule", choices=LR_SCHEDULES, default=defaults.lr_schedule,
                        help="after warm-up: hold the rate and cut it on plateaus, or decay it along a cosine to 0")
    parser.add_argument("--warmup-epochs", type=int, default=defaults.warmup_epochs)
    parser.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                        help="resume from <out>/checkpoints/ if a checkpoint is there (default: yes)")
    parser.add_argument("--hidden-units", default=",".join(map(str, defaults.hidden_units)))
    parser.add_argument("--embedding-dim", type=int, default=defaults.embedding_dim)
    parser.add_argument("--champion-model", default="",
                        help="the champion to score beside the new model on the same validation rows: a model attempt "
                             "or train output URI (empty: there is no champion)")
    parser.add_argument("--champion-model-sha256", default="",
                        help="the champion's recorded SHA-256 digests (champion record model_sha256, JSON); empty: "
                             "those its train job committed")
    parser.add_argument("--warm-start-model", default="",
                        help="start from this model's weights (a model attempt or train output URI) when there is no "
                             "checkpoint to resume; empty: a cold start")
    parser.add_argument("--warm-start-model-sha256", default="",
                        help="the --warm-start-model's recorded SHA-256 digests (JSON); empty: its train job's")
    parser.add_argument("--warm-start-epochs", type=int, default=None,
                        help="epochs of a warm-started run (default: --epochs)")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help="initial weights and shuffling (rank r uses seed + r); compare defaults over several")
    parser.add_argument("--season-backtest", action="store_true",
                        help="train the calendar-matched backtest instead of the day's model: the same recipe a "
                             "year earlier (training/season_backtest.py), scored with the naive baseline on the "
                             "year-earlier horizon; cold, no champion")
    parser.add_argument("--backtest-min-train-days", type=int, default=season_backtest.DEFAULT_MIN_TRAIN_DAYS,
                        help="with --season-backtest: the shortest history before the year-earlier origin to run "
                             "it on (shorter: committed as not available)")
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "embedding_dim", "warm_start_epochs", "min_steps_per_epoch"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup_epochs < 0:
        parser.error("--warmup-epochs must be >= 0")
    if args.num_proc is not None and args.num_proc < 1:
        parser.error("--num-proc must be >= 1")
    return args


def default_num_proc(master: str, conf: dict[str, str], default_parallelism: int) -> int:
    """One Horovod process per task slot the application can get.

    local[N]: N. On a cluster the configured caps (spark.cores.max, or executor instances x cores) are preferred to
    defaultParallelism, which only counts executors registered so far. Divided by spark.task.cpus.
    """
    task_cpus = int(conf.get("spark.task.cpus", "1"))
    if master.startswith("local"):
        slots = default_parallelism
    elif "spark.cores.max" in conf:
        slots = int(conf["spark.cores.max"])
    elif "spark.executor.instances" in conf and "spark.executor.cores" in conf:
        slots = int(conf["spark.executor.instances"]) * int(conf["spark.executor.cores"])
    else:
        slots = default_parallelism
    return max(1, slots // task_cpus)


def slots_are_fixed(master: str, conf: dict[str, str]) -> bool:
    """Whether default_num_proc is the application's ceiling, not just the executors registered so far."""
    in_process = master == "local" or master.startswith("local[")   # not local-cluster: executors still register
    return (in_process or "spark.cores.max" in conf
            or ("spark.executor.instances" in conf and "spark.executor.cores" in conf
                and conf.get("spark.dynamicAllocation.enabled", "false") != "true"))


def resolve_num_proc(requested: int | None, spark, train_files: int) -> int:
    """Every rank must own at least one train file and a task slot: an explicit request above either fails
    (horovod.spark.run would otherwise wait for slots until its start timeout), a default is capped."""
    context = spark.sparkContext
    conf = dict(context.getConf().getAll())
    slots = default_num_proc(context.master, conf, context.defaultParallelism)
    if requested is not None:
        if requested > train_files:
            raise FeatureDataError(f"--num-proc {requested} exceeds the {train_files} train files: each rank reads "
                                   "whole files. Lower --num-proc or write more shards in the prepare job.")
        if requested > slots and slots_are_fixed(context.master, conf):
            raise FeatureDataError(
                f"--num-proc {requested} exceeds the {slots} Spark task slots of master {context.master} "
                f"(spark.task.cpus={conf.get('spark.task.cpus', '1')}): Horovod needs one slot per process and "
                "would wait for the missing ones until its start timeout. Lower --num-proc or give the "
                "application more cores.")
        return requested
    if slots > train_files:
        log.warning("capping num_proc from %d task slots to the %d train files", slots, train_files)
    return min(slots, train_files)


def worker_env() -> dict[str, str]:
    return {key: os.environ.get(key, default) for key, default in WORKER_TIMEOUT_ENV.items()}


def params_from_args(args: argparse.Namespace) -> TrainParams:
    hidden_units = tuple(int(units) for units in args.hidden_units.split(",") if units.strip())
    return TrainParams(epochs=args.epochs, batch_size=args.batch_size, min_steps_per_epoch=args.min_steps_per_epoch,
                       learning_rate=args.learning_rate,
                       hidden_units=hidden_units, embedding_dim=args.embedding_dim, lr_schedule=args.lr_schedule,
                       warmup_epochs=args.warmup_epochs, seed=args.seed)


def run_horovod(config: WorkerConfig, num_proc: int, executable: str | None = None) -> list[dict[str, Any]]:
    """Train on num_proc Horovod ranks started by horovod.spark.run, each in `executable` (default: this Python)."""
    import horovod.spark

    prepare_horovod_spark()
    start_timeout = int(os.environ.get("HOROVOD_SPARK_START_TIMEOUT", DEFAULT_START_TIMEOUT_S))
    # Horovod's services (the Gloo rendezvous is unauthenticated) listen on one interface only: loopback unless
    # the cluster's private network is named (training/network.py).
    nics = network.restrict_horovod(os.environ.get(network.NICS_ENV, network.LOOPBACK))
    # use_gloo: the ranks talk over Gloo either way (Horovod is built without MPI here), but left to choose, Horovod
    # asks whether it was built with MPI, then with Gloo, each time in a fresh process that imports TensorFlow:
    # seconds of start-up per check (bench/RESULTS.md, "Fixed cost per run").
    return horovod.spark.run(train_fn, args=(config,), num_proc=num_proc, start_timeout=start_timeout,
                             env=worker_env(), stdout=sys.stdout, stderr=sys.stderr, verbose=1,
                             prefix_output_with_timestamp=True, nics=nics, use_gloo=True,
                             executable=executable or sys.executable)


def write_model(attempt: str, features: FeatureSet, summary: dict[str, Any], params: TrainParams) -> ModelSource:
    """The best model's weights and its description (the params it is built from) into the attempt; returns it as
    a model source with the SHA-256 digests of what was written (what gets scored, and committed)."""
    artifact = train_outputs.artifact_description(features, summary, params)
    weights = storage.read_bytes(summary["best_model"])
    if sha256_hex(weights) != summary["best_model_sha256"]:   # replaced since the last checkpoint's pointer
        raise checkpoint.CheckpointError(f"{summary['best_model']} does not match its checkpoint pointer's SHA-256")
    read_weights(weights, summary["best_model"])
    digests = write_model_files(attempt, artifact, weights)
    return ModelSource(uri=attempt, attempt=attempt, artifact=artifact, digests=digests)


def warm_start_plan(args: argparse.Namespace, features: FeatureSet,
                    params: TrainParams) -> tuple[WarmStart | None, TrainParams, dict]:
    """The warm start to pass to the ranks (None: cold), the params of the run (a warm start runs
    --warm-start-epochs) and metrics.json's `warm_start` entry."""
    if not args.warm_start_model:
        return None, params, {"requested": None, "used": False, "reason": "no --warm-start-model"}
    plan, refusal = plan_warm_start(args.warm_start_model, features, params, args.warm_start_model_sha256)
    if plan is None:
        log.warning("cold start: --warm-start-model %s cannot seed this run: %s", args.warm_start_model, refusal)
        return None, params, {"requested": args.warm_start_model, "used": False, "reason": refusal}
    if args.warm_start_epochs:
        params = dataclasses.replace(params, epochs=args.warm_start_epochs)
    return plan, params, {"requested": args.warm_start_model, "used": True, **plan.describe()}


def write_metrics(attempt: str, summary: dict[str, Any], params: TrainParams, num_proc: int,
                  timings: dict[str, float], scores: dict[str, Any], warm_start: dict[str, Any],
                  extra: dict[str, Any] | None = None) -> None:
    from rossmann_jobs.reporting.training_curves import training_curves_png  # matplotlib: only where it draws

    # A resumed run keeps how its first try started.
    warm_start = {**warm_start, "used": bool(summary.get("warm_started"))}
    storage.write_json(storage.join(attempt, TRAIN_METRICS_FILE),
                       {**train_outputs.metrics_document(summary, params, num_proc, timings), "gate_scores": scores,
                        "warm_start": warm_start, **(extra or {})})
    storage.write_bytes(storage.join(attempt, TRAINING_CURVES_FILE),
                        training_curves_png(summary["history"], summary["best_epoch"]))


def run(spark, args: argparse.Namespace) -> dict[str, Any]:
    """Scan the features, train with Horovod, score the gate's numbers and commit the model with its metrics."""
    timings: dict[str, float] = {}
    with timed("read features", timings):
        features = load_feature_set(args.features)
    backtest, scoring = None, features
    if args.season_backtest:
        if args.champion_model or args.warm_start_model:
            raise FeatureDataError("--season-backtest trains cold and scores no champion: a champion was trained "
                                   "on data after the year-earlier origin")
        with timed("season backtest splits", timings):
            views = season_backtest.prepare_views(spark, features, storage.join(args.out, BACKTEST_FEATURES_DIR),
                                                  date.fromisoformat(features.metadata["as_of"]),
                                                  args.backtest_min_train_days)
        if not isinstance(views, season_backtest.BacktestViews):
            log.warning("season backtest not available: %s", views["reason"])
            attempt = storage.new_attempt_uri(args.out)
            storage.write_json(storage.join(attempt, TRAIN_METRICS_FILE), {"season_backtest": views})
            return storage.commit(args.out, attempt, {"season_backtest": views})
        features, scoring, backtest = views.training, views.scoring, views.facts
        log.info("season backtest: origin %s, training rows up to %s, scored on %s .. %s", backtest["origin"],
                 backtest["train_end"], backtest["window_start"], backtest["window_end"])
    with timed("scan features", timings):
        train_units = scan_files(features.train_files, features.vocab_sizes)
        validation_units = scan_files(features.validation_files, features.vocab_sizes)
    if not any(unit.rows for unit in validation_units):
        raise FeatureDataError(f"{features.attempt_uri}: the validation set is empty; early stopping and "
                               "best-model selection need it. Re-run prepare with a validation window.")
    num_proc = resolve_num_proc(args.num_proc, spark, len(features.train_files))
    params = params_from_args(args)
    checkpoints = checkpoint.checkpoint_root(args.out)
    if not args.resume and storage.exists(checkpoints):
        log.info("--no-resume: removing old checkpoints under %s", checkpoints)
        storage.delete_prefix(checkpoints)
    with timed("train statistics", timings):
        start = train_statistics(features.train_files)
    warm_start, params, warm_start_facts = warm_start_plan(args, features, params)
    config = WorkerConfig(train_units=train_units, validation_units=validation_units,
                          vocab_sizes=features.vocab_sizes, max_sales=features.max_sales,
                          params=params.to_dict(), checkpoint_root=checkpoints,
                          features_attempt=features.attempt_uri, resume=args.resume,
                          start=start, warm_start=warm_start)
    log.info("training on %s (%d train files, %d rows) with %d Horovod processes, %d epochs, batch %d/rank",
             features.attempt_uri, len(features.train_files), sum(u.rows for u in train_units), num_proc,
             params.epochs, params.batch_size)
    with timed("horovod training", timings):
        try:
            results = run_horovod(config, num_proc, rank_python(dict(spark.sparkContext.getConf().getAll()),
                                                                dict(os.environ), sys.executable))
        except Exception:
            pointer = checkpoint.read_pointer(checkpoints)
            kept = (f"the checkpoint after epoch {pointer['epoch']} under {checkpoints} is kept; a re-run "
                    "resumes from it" if pointer else "no checkpoint was written yet")
            log.error("Horovod training failed: %s", kept)
            raise
    summary = results[0]
    for shard in summary["ranks"]:
        log.info("rank %d trained on %d rows from %d files in Spark executor dir %s (host %s)", shard["rank"],
                 shard["train_rows"], len(shard["train_files"]), shard["executor_dir"], shard["host"])
    attempt = storage.new_attempt_uri(args.out)
    with timed("write model", timings):
        challenger = write_model(attempt, features, summary, params)
    with timed("gate scores", timings):
        scores = gate_scores(spark, scoring, challenger, args.champion_model, args.champion_model_sha256)
    extra = {}
    if backtest is not None:
        backtest.update(available=True, challenger=scores["challenger"], baseline=scores["baseline"],
                        scored_rows=scores["validation_rows"], best_epoch=summary["best_epoch"])
        extra["season_backtest"] = backtest
    write_metrics(attempt, summary, params, num_proc, timings, scores, warm_start_facts, extra)
    manifest = storage.commit(args.out, attempt, {"best_epoch": summary["best_epoch"],
                                                  "best_val_exp_rmspe": summary["best_val_exp_rmspe"],
                                                  "horovod_size": summary["horovod_size"],
                                                  "epochs_run": len(summary["history"]), "gate_scores": scores,
                                                  "warm_started": bool(summary.get("warm_started")),
                                                  # what the gate checks its pinned copy against
                                                  DIGESTS_KEY: challenger.digests, **extra})
    log.info("committed %s: best epoch %s, val exp_rmspe %.5f", attempt, summary["best_epoch"],
             summary["best_val_exp_rmspe"])
    return manifest


def main(argv: list[str] | None = None) -> int:
    # Progress every minute: Horovod's training is one long Spark stage.
    return run_job("train", run, parse_args(argv),
                   (FeatureDataError, storage.OutputNotCommittedError, ModelRefusedError), progress_interval_s=60)


if __name__ == "__main__":
    sys.exit(main())
