"""The function every Horovod rank runs (horovod.spark.run): hvd.init, shard input, data-parallel training loop.

Custom loop rather than model.fit + hvd.DistributedOptimizer: with the legacy (fused) Adam it was the fastest
variant measured on TF 2.15 (bench/RESULTS.md "## Train job"), and it measures the data wait exactly, allreduces
exact metric sums instead of averaging per-rank values, and keeps warm-up / plateau / early-stop state in a
checkpointable form. The gradients are averaged in one allreduce per step (see _make_steps).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import rossmann_jobs
from rossmann_jobs.job_protocol import configure_logging
from rossmann_jobs.metrics import exp_rmspe_sums_tf, rmspe_from_sums
from rossmann_jobs.model.architecture import (
    TrainStatistics,
    build_model,
)
from rossmann_jobs.model.params import TrainParams
from rossmann_jobs.training import checkpoint, schedule
from rossmann_jobs.training.feature_set import ParquetUnit, rank_units
from rossmann_jobs.training.optimizer import make_optimizer
from rossmann_jobs.training.shard_input import eval_chunks, local_copies, split_label, steps_per_epoch, train_dataset
from rossmann_jobs.training.warm_start import WarmStart, load_weights

log = logging.getLogger("rossmann.train")


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a rank needs, pickled to the Spark executors by horovod.spark.run."""
    train_units: list[ParquetUnit]
    validation_units: list[ParquetUnit]
    vocab_sizes: dict[str, int]
    max_sales: float
    params: dict[str, Any]
    checkpoint_root: str
    features_attempt: str
    resume: bool
    start: TrainStatistics | None = None  # train-split statistics the untrained model starts from
    warm_start: WarmStart | None = None   # an earlier model to start from when there is no checkpoint to resume
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])


@dataclass(frozen=True)
class ShardPlan:
    """This rank's files and what all ranks agreed on: total rows and the common number of steps per epoch."""
    train_units: list[ParquetUnit]
    validation_units: list[ParquetUnit]
    shard: dict[str, Any]
    train_rows_total: int
    validation_rows_total: int
    steps: int


def train_fn(config: WorkerConfig) -> dict[str, Any]:
    """Runs on each Horovod process. Rank 0 returns the training summary; every rank returns its shard info."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    configure_logging(f"rossmann.train rank {rank}/{size}")
    _pin_devices(tf, hvd)
    placement = _placement(hvd)
    log.info("rank %d/%d runs in Spark executor dir %s (host %s, pid %d, local rank %d/%d, python %s, "
             "rossmann_jobs from %s)", rank, size, placement["executor_dir"], placement["host"], placement["pid"],
             hvd.local_rank(), hvd.local_size(), placement["python"], placement["package_dir"])
    params = TrainParams.from_dict(config.params)
    plan = _plan_shards(hvd, tf, config, params)
    with tempfile.TemporaryDirectory(prefix=f"rossmann-shard-rank{rank}-") as shard_dir:
        fetched_at = time.perf_counter()
        # One call for both splits: its numbering keeps the local names apart when two splits' files share a name.
        copies = local_copies([*plan.train_units, *plan.validation_units], shard_dir)
        split_at = len(plan.train_units)
        plan = dataclasses.replace(plan, train_units=copies[:split_at], validation_units=copies[split_at:])
        log.info("rank %d/%d: shard copied to local disk in %.1f s", rank, size, time.perf_counter() - fetched_at)
        return _train(hvd, tf, config, params, plan, placement)


def _train(hvd, tf, config: WorkerConfig, params: TrainParams, plan: ShardPlan,
           placement: dict[str, Any]) -> dict[str, Any]:
    """The epochs of one rank from its (local) shard: resume or start, train, validate, checkpoint on rank 0."""
    rank, size = hvd.rank(), hvd.size()
    # Seeded initial weights (rank 0's are broadcast) and per-rank dropout: a re-run on the same features
    # reproduces the model, so a cleared-and-re-run train task is idempotent up to float round-off.
    tf.keras.utils.set_random_seed(params.seed + rank)
    model = build_model(config.vocab_sizes, config.max_sales, params, config.start)
    optimizer = make_optimizer(params, model.trainable_variables)
    # Rank 0 decides (fresh start or checkpoint); every rank starts from its weights, slots and bookkeeping.
    state = hvd.broadcast_object(_initial_state(config, params, model, optimizer, rank, size), root_rank=0)
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(optimizer.weights, root_rank=0)
    sched = schedule.ScheduleState.from_dict(state["schedule"])
    history: list[dict[str, Any]] = state["history"]
    if rank == 0 and state["epoch"] > 0:
        log.info("resuming from epoch %d (checkpoint after epoch %d, best epoch %s)", state["epoch"] + 1,
                 state["epoch"], sched.best_epoch)

    step_fns = _make_steps(tf, hvd, model, optimizer, params)
    epochs = range(state["epoch"] + 1, params.epochs + 1)
    batches = iter(train_dataset(plan.train_units, params.batch_size, plan.steps, epochs, params.seed, rank,
                                 params.shuffle_buffer_rows))
    for epoch in epochs:
        if sched.stopped:
            break
        record = _run_epoch(tf, hvd, epoch, batches, plan, model, optimizer, step_fns, params, sched.lr_factor)
        record["run_id"] = config.run_id
        sched, events = schedule.after_epoch(sched, epoch, record["val_exp_rmspe"], params)
        history.append(record)
        if rank == 0:
            _log_epoch(record, params.epochs, events)
            saved_at = time.perf_counter()
            checkpoint.save(config.checkpoint_root, epoch, model, optimizer,
                            _state(epoch, sched, history, params, config, size, state["warm_started"]),
                            is_best=sched.best_epoch == epoch)
            log.info("epoch %d: checkpoint written in %.1f s", epoch, time.perf_counter() - saved_at)

    # Destroying the exhausted tf.data iterator (from_generator) blocks one rank for 20-40 s on TF 2.15, and
    # horovod.spark.run waits for every rank's process to exit: let a daemon thread drop it while this rank finishes.
    pipeline = [batches]
    del batches
    threading.Thread(target=pipeline.clear, name="drop-input-pipeline", daemon=True).start()
    shards = hvd.allgather_object({**plan.shard, **placement})
    if rank != 0:
        return {"shard": plan.shard}
    return {"shard": plan.shard, "history": history, "ranks": shards, "horovod_size": size,
            "steps_per_epoch": plan.steps, "train_rows_total": plan.train_rows_total,
            "validation_rows_total": plan.validation_rows_total, "best_epoch": sched.best_epoch,
            "best_val_exp_rmspe": sched.best_value, "stopped_early": sched.stopped,
            "resumed_after_epoch": state["epoch"] or None, "warm_started": state.get("warm_started", False),
            **_best_model(config.checkpoint_root)}


def _best_model(root: str) -> dict[str, str]:
    """Where the best model's weights are and their SHA-256, from the last checkpoint's pointer."""
    pointer = checkpoint.read_pointer(root)
    return {"best_model": checkpoint.best_model_uri(root, pointer),
            "best_model_sha256": pointer[checkpoint.DIGESTS][pointer["best_model"]]}


def _plan_shards(hvd, tf, config: WorkerConfig, params: TrainParams) -> ShardPlan:
    """Pick files[rank::size]; allreduce the row counts, so all ranks run the steps the largest shard needs."""
    rank, size = hvd.rank(), hvd.size()
    train_units = rank_units(config.train_units, rank, size)
    validation_units = rank_units(config.validation_units, rank, size)
    shard = {"rank": rank, "train_files": sorted({u.uri for u in train_units}),
             "train_rows": sum(u.rows for u in train_units), "validation_rows": sum(u.rows for u in validation_units)}
    log.info("rank %d/%d: train shard %d files, %d rows; validation shard %d rows", rank, size,
             len(shard["train_files"]), shard["train_rows"], shard["validation_rows"])
    totals = hvd.allreduce(tf.constant([shard["train_rows"], shard["validation_rows"]], tf.int64), op=hvd.Sum)
    largest = int(hvd.allreduce(tf.constant(shard["train_rows"], tf.int64), op=hvd.Max))
    train_rows_total, validation_rows_total = (int(value) for value in totals.numpy())
    steps = steps_per_epoch(largest, params.batch_size, params.min_steps_per_epoch)
    if rank == 0:
        log.info("allreduced: %d train rows, %d validation rows over %d ranks; %d steps/epoch of %d rows per rank",
                 train_rows_total, validation_rows_total, size, steps, params.batch_size)
    return ShardPlan(train_units, validation_units, shard, train_rows_total, validation_rows_total, steps)


def _run_epoch(tf, hvd, epoch: int, batches, plan: ShardPlan, model, optimizer, step_fns, params: TrainParams,
               lr_factor: float) -> dict[str, Any]:
    """Train plan.steps batches, then validate this rank's shard; metrics come from allreduced exact sums."""
    train_step, eval_step, train_sums = step_fns
    started = time.perf_counter()
    train_sums.assign(tf.zeros_like(train_sums))
    data_wait = compute = 0.0
    for step in range(plan.steps):
        optimizer.learning_rate.assign(
            schedule.learning_rate(params, hvd.size(), epoch - 1 + step / plan.steps, lr_factor))
        before = time.perf_counter()
        features, labels = next(batches)
        fetched = time.perf_counter()
        train_step(features, labels)
        compute += time.perf_counter() - fetched
        data_wait += fetched - before
    train_seconds = time.perf_counter() - started
    # Batch-norm moving statistics follow each rank's own batches: average them so that every rank evaluates,
    # and rank 0 saves, the same model.
    for variable in model.non_trainable_variables:
        variable.assign(hvd.allreduce(variable, op=hvd.Average))

    validation_sums = tf.zeros([4], tf.float64)
    for chunk in eval_chunks(plan.validation_units, params.eval_batch_size):
        validation_sums += eval_step(*split_label(chunk))
    reduced = hvd.allreduce(tf.concat([train_sums, validation_sums,
                                       tf.constant([data_wait, data_wait + compute], tf.float64)], 0),
                            op=hvd.Sum).numpy()
    return _epoch_record(epoch, reduced, float(tf.add_n(model.losses).numpy()),
                         float(optimizer.learning_rate.numpy()), hvd.size(), plan.steps, params.batch_size,
                         train_seconds, time.perf_counter() - started)


def _log_epoch(record: dict[str, Any], epochs: int, events: list[str]) -> None:
    log.info("epoch %d/%d: loss %.4f exp_rmspe %.4f | val loss %.4f val exp_rmspe %.4f | lr %.2e | "
             "%.1f s, %.0f samples/s, data wait %.1f%%", record["epoch"], epochs, record["train_loss"],
             record["train_exp_rmspe"], record["val_loss"], record["val_exp_rmspe"], record["learning_rate"],
             record["epoch_seconds"], record["samples_per_second"], 100 * record["data_wait_share"])
    for event in events:
        log.info("epoch %d: %s", record["epoch"], event)


def _initial_state(config: WorkerConfig, params: TrainParams, model, optimizer, rank: int, size: int) -> dict:
    fresh = {"epoch": 0, "schedule": schedule.ScheduleState().to_dict(), "history": [], "warm_started": False}
    if rank != 0:
        return fresh
    pointer = checkpoint.read_pointer(config.checkpoint_root) if config.resume else None
    if pointer is None:
        log.info("no checkpoint under %s to resume: starting at epoch 1", config.checkpoint_root)
        return _start(config, model, fresh)
    try:
        saved = checkpoint.read_state(config.checkpoint_root, pointer)
        mismatch = _resume_mismatch(saved, config, params)
        if not mismatch:
            checkpoint.restore(config.checkpoint_root, pointer, model, optimizer)
    except checkpoint.CheckpointError as error:
        mismatch = str(error)
    if mismatch:
        log.warning("checkpoint after epoch %s is not resumable (%s): starting at epoch 1", pointer.get("epoch"),
                    mismatch)
        return _start(config, model, fresh)
    if saved["horovod_size"] != size:
        log.warning("checkpoint was written with %d ranks, now %d: the learning rate scales to the new size",
                    saved["horovod_size"], size)
    return {"epoch": saved["epoch"], "schedule": saved["schedule"], "history": saved["history"],
            "warm_started": saved.get("warm_started", False)}


def _start(config: WorkerConfig, model, fresh: dict) -> dict:
    """Epoch 1 from the seeded initial weights, or from the warm-start model's (a resumed run keeps its own)."""
    if config.warm_start is None:
        return fresh
    load_weights(model, config.warm_start)
    return {**fresh, "warm_started": True}


def _resume_mismatch(saved: dict, config: WorkerConfig, params: TrainParams) -> str | None:
    if saved["features_attempt"] != config.features_attempt:
        return f"it was trained on {saved['features_attempt']}, these features are {config.features_attempt}"
    if saved["vocab_sizes"] != config.vocab_sizes:
        return "vocabulary sizes changed"
    if saved["architecture"] != params.architecture():
        return f"architecture {saved['architecture']} != {params.architecture()}"
    if saved["seed"] != params.seed:   # another draw: its weights are not this run's
        return f"seed {saved['seed']} != {params.seed}"
    return None


def _state(epoch: int, sched, history: list, params: TrainParams, config: WorkerConfig, size: int,
           warm_started: bool) -> dict:
    """What resuming needs besides weights and optimizer slots; shuffling derives from (seed, epoch, rank)."""
    return {"epoch": epoch, "schedule": sched.to_dict(), "history": history, "seed": params.seed,
            "params": params.to_dict(), "architecture": params.architecture(), "vocab_sizes": config.vocab_sizes,
            "features_attempt": config.features_attempt, "horovod_size": size,
            "warm_started": warm_started}


def _make_steps(tf, hvd, model, optimizer, params: TrainParams):
    # Running sums: [sum of per-batch loss, sum abs error, sum squared pct error, pct rows, rows, batches].
    train_sums = tf.Variable(tf.zeros([6], tf.float64), trainable=False)

    variables = model.trainable_variables
    sizes = [int(math.prod(variable.shape)) for variable in variables]

    def averaged_gradients(tape, loss):
        if not params.sparse_as_dense:
            return hvd.DistributedGradientTape(tape, sparse_as_dense=False).gradient(loss, variables)
        # Dense gradients in one allreduce of their concatenation: the same average as DistributedGradientTape's
        # allreduce per variable, whose ~40 negotiations cost more than the step's compute on 2 cores
        # (docs/decisions.md, "one allreduce of all the gradients": a step of 5.9 ms compute took 12.9-14.6 ms with the
        # per-variable allreduces, 10.9 ms with this one).
        gradients = [tf.reshape(tf.convert_to_tensor(gradient), [-1]) for gradient in tape.gradient(loss, variables)]
        averaged = hvd.allreduce(tf.concat(gradients, 0), op=hvd.Average, name="gradients")
        return [tf.reshape(part, variable.shape) for part, variable in zip(tf.split(averaged, sizes), variables)]

    @tf.function
    def train_step(features, labels):
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            mae = tf.reduce_mean(tf.abs(labels - predictions))
            loss = mae + tf.add_n(model.losses)
        optimizer.apply_gradients(zip(averaged_gradients(tape, loss), variables))
        squared, counted = exp_rmspe_sums_tf(labels, predictions)
        rows = tf.cast(tf.shape(labels)[0], tf.float32)
        train_sums.assign_add(tf.cast(tf.stack([loss, mae * rows, squared, counted, rows, 1.0]), tf.float64))

    @tf.function(reduce_retracing=True)
    def eval_step(features, labels):
        predictions = model(features, training=False)
        squared, counted = exp_rmspe_sums_tf(labels, predictions)
        return tf.cast(tf.stack([tf.reduce_sum(tf.abs(labels - predictions)), squared, counted,
                                 tf.cast(tf.shape(labels)[0], tf.float32)]), tf.float64)

    return train_step, eval_step, train_sums


def _epoch_record(epoch: int, reduced, l2_penalty: float, learning_rate: float, size: int, steps: int,
                  batch_size: int, train_seconds: float, epoch_seconds: float) -> dict[str, Any]:
    """Metrics of one epoch from the allreduced sums (train 0-5, validation 6-9, data wait 10, step time 11)."""
    train_loss_sum, train_abs, train_sq, train_counted, train_rows, train_batches = reduced[0:6]
    val_abs, val_sq, val_counted, val_rows = reduced[6:10]
    val_mae = val_abs / val_rows if val_rows else math.nan
    return {
        "epoch": epoch,
        "train_loss": train_loss_sum / train_batches,
        "train_mae": train_abs / train_rows,
        "train_exp_rmspe": rmspe_from_sums(train_sq, train_counted),
        "val_loss": val_mae + l2_penalty,
        "val_mae": val_mae,
        "val_exp_rmspe": rmspe_from_sums(val_sq, val_counted),
        "learning_rate": learning_rate,
        "train_samples": int(train_rows),
        "validation_samples": int(val_rows),
        "epoch_seconds": round(epoch_seconds, 3),
        "train_seconds": round(train_seconds, 3),
        "samples_per_second": round(train_rows / train_seconds, 1),
        "data_wait_share": round(reduced[10] / reduced[11], 4) if reduced[11] else 0.0,
        "horovod_size": size,
        "steps": steps,
        "batch_size": batch_size,
    }


def _placement(hvd) -> dict[str, Any]:
    """Where this rank runs. Horovod starts the rank from its Spark task and hands it the task's working directory,
    which is the executor's own folder (standalone: <worker dir>/<app id>/<executor id>, YARN: the container's).
    The Python and the package it runs show whether a shipped environment (spark.archives) and package
    (--py-files) reached the rank."""
    return {"executor_dir": os.environ.get("HOROVOD_SPARK_WORK_DIR", os.getcwd()), "host": socket.gethostname(),
            "pid": os.getpid(), "horovod_host": os.environ.get("HOROVOD_HOSTNAME", ""),
            "local_rank": hvd.local_rank(), "python": sys.executable,
            "package_dir": os.path.dirname(rossmann_jobs.__file__)}


def _pin_devices(tf, hvd) -> None:
    """One GPU per local rank if there are GPUs; on CPU split the cores between the ranks on this host."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
        return
    threads = max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
