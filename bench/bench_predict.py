"""Benchmark: predict-job throughput (vectorized mapInPandas) vs row-at-a-time inference as in Horovod's example.

Builds a conforming features output at full Rossmann scale (41,088 test rows, ~47k validation rows) and the
reference-size model (rossmann_jobs.model.architecture with the reference defaults, untrained weights: inference cost
does not depend on their values), then in one Spark session (local[2]) measures:
  1. the whole predict job, cold (fresh Python workers: TF import + model load included);
  2. the whole predict job again, warm (workers reused, model cached);
  3. vectorized inference alone (mapInPandas -> noop sink, warm) over test + validation rows;
  4. row-at-a-time inference as in horovod/examples/spark/keras/keras_spark_rossmann_run.py (rdd.mapPartitions,
     model loaded per partition, model.predict_on_batch once per row) on a sample of rows; the full-scale time
     is EXTRAPOLATED from the sample's per-row rate.
Writes bench/out/predict.json and prints a table.

    PYTHONPATH=. .venvs/jobs/bin/python bench/bench_predict.py [--sample-rows 400]
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import sys
import tempfile
import time
from datetime import date, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rossmann_jobs import predict, storage
from rossmann_jobs.features.spec import CATEGORICAL_COLS, CONTINUOUS_COLS, FEATURE_COLS, LABEL_COL
from rossmann_jobs.forecast.inference import with_log_forecast
from rossmann_jobs.model.broadcast import BroadcastModel
from rossmann_jobs.model.store import open_model
from rossmann_jobs.model.trust import STORAGE_ROOT_ENV
from rossmann_jobs.output_layout import METADATA_FILE, TEST_DIR, TRAIN_DIR, VALIDATION_DIR
from rossmann_jobs.spark_session import build_spark_session

# Real-data vocabulary sizes (known values; the index adds 1 for unknown), from the Rossmann files.
VOCAB_COUNTS = {"Store": 1115, "State": 12, "DayOfWeek": 7, "Year": 3, "Month": 12, "Day": 31, "Week": 52,
                "CompetitionMonthsOpen": 25, "Promo2Weeks": 26, "StoreType": 4, "Assortment": 3, "PromoInterval": 3,
                "CompetitionOpenSinceYear": 23, "Promo2SinceYear": 7, "Events": 21, "Promo": 2, "StateHoliday": 4,
                "SchoolHoliday": 2}
MAX_SALES = 41551.0
TEST_STORES, VALIDATION_STORES, DAYS = 856, 980, 48   # 41,088 test rows, 47,040 validation rows
SHARDS = 16


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample-rows", type=int, default=400, help="rows for the row-at-a-time baseline")
    parser.add_argument("--workdir", default=None, help="where inputs/outputs go (default: a temp dir)")
    parser.add_argument("--json", default="bench/out/predict.json")
    return parser.parse_args()


def frames(seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Conforming test and validation frames with random in-range feature values (shape is what matters here)."""
    rng = np.random.default_rng(seed)

    def grid(stores: int, start: date) -> pd.DataFrame:
        days = [start + timedelta(days=d) for d in range(DAYS)]
        frame = pd.DataFrame({"StoreId": np.repeat(np.arange(1, stores + 1, dtype=np.int32), DAYS),
                              "Date": days * stores})
        for column, count in VOCAB_COUNTS.items():
            frame[column] = rng.integers(0, count + 1, size=len(frame)).astype(np.int32)
        frame["Store"] = frame["StoreId"]
        for column in CONTINUOUS_COLS:
            frame[column] = rng.normal(size=len(frame)).astype(np.float32)
        return frame

    test = grid(TEST_STORES, date(2015, 8, 1))
    test.insert(0, "Id", np.arange(1, len(test) + 1, dtype=np.int32))
    sundays = np.array([d.isoweekday() == 7 for d in test["Date"]])
    test["Open"] = pd.array(np.where(sundays, 0, 1), dtype="Int32")
    test.loc[test.index[:11], "Open"] = pd.NA                       # as in the real test.csv
    validation = grid(VALIDATION_STORES, date(2014, 8, 1))
    validation[LABEL_COL] = np.log(rng.uniform(1000, 15000, size=len(validation))).astype(np.float32)
    return test, validation


def write_features(uri: str, test: pd.DataFrame, validation: pd.DataFrame) -> None:
    attempt = storage.new_attempt_uri(uri)
    for name, frame in ((TEST_DIR, test), (VALIDATION_DIR, validation), (TRAIN_DIR, validation.head(0))):
        for index, rows in enumerate(np.array_split(np.arange(len(frame)), SHARDS if len(frame) else 1)):
            buffer = io.BytesIO()
            pq.write_table(pa.Table.from_pandas(frame.iloc[rows], preserve_index=False), buffer)
            storage.write_bytes(storage.join(attempt, name, f"part-{index:05d}.parquet"), buffer.getvalue())
    vocabularies = {column: list(range(1, count + 1)) for column, count in VOCAB_COUNTS.items()}
    storage.write_json(storage.join(attempt, METADATA_FILE), {
        "feature_spec": {"categorical": [{"name": c, "vocab_size": VOCAB_COUNTS[c] + 1} for c in CATEGORICAL_COLS],
                         "continuous": CONTINUOUS_COLS, "label": LABEL_COL},
        "vocabularies": vocabularies, "max_sales": MAX_SALES, "num_shards": SHARDS,
        "row_counts": {"test": len(test), "validation": len(validation)}})
    storage.commit(uri, attempt, {})


def write_raw_test(uri: str, test: pd.DataFrame) -> str:
    """The drop's test.csv that the features stand for (predict checks the submission against its Ids)."""
    raw = pd.DataFrame({"Id": test["Id"], "Store": test["StoreId"], "DayOfWeek": [d.isoweekday() for d in test["Date"]],
                        "Date": test["Date"].astype(str), "Open": test["Open"], "Promo": 0, "StateHoliday": "0",
                        "SchoolHoliday": 0})
    storage.write_bytes(storage.join(uri, "test.csv"), raw.to_csv(index=False).encode())
    return uri


def write_model(uri: str) -> bytes:
    """The reference architecture (train job's builder, reference defaults), committed like the train job does;
    returns the same model as a whole-model HDF5 file, which only the row-at-a-time reference reads (built here)."""
    from rossmann_jobs.model import files as model_files
    from rossmann_jobs.model.architecture import build_model
    from rossmann_jobs.model.params import TrainParams
    from rossmann_jobs.model.trust import DIGESTS_KEY

    vocab_sizes = {c: VOCAB_COUNTS[c] + 1 for c in CATEGORICAL_COLS}
    model = build_model(vocab_sizes, MAX_SALES, TrainParams())
    attempt = storage.new_attempt_uri(uri)
    digests = model_files.write_model(attempt, {
        "feature_order": FEATURE_COLS, "vocabularies": {c: list(range(1, VOCAB_COUNTS[c] + 1)) for c in VOCAB_COUNTS},
        "vocab_sizes": vocab_sizes, "max_sales": MAX_SALES, "label_transform": "log",
        "params": TrainParams().to_dict(), "parameters": model.count_params()}, model_files.weights_bytes(model))
    storage.commit(uri, attempt, {DIGESTS_KEY: digests})
    local = os.path.join(tempfile.mkdtemp(prefix="bench-predict-"), "model.h5")
    model.save(local)
    with open(local, "rb") as handle:
        return handle.read()


def row_at_a_time(model_bytes_broadcast, feature_cols, loop_seconds, loop_rows, load_seconds):
    """Horovod keras_spark_rossmann_run.py's predict_fn: load per partition, predict_on_batch once per row."""
    def fn(rows):
        import os
        import tempfile

        import numpy as np
        import tensorflow as tf
        from pyspark.sql import Row

        try:
            tf.config.threading.set_intra_op_parallelism_threads(1)  # the example's single CPU thread per task
        except RuntimeError:
            pass  # a reused worker whose TF was already set up (to 1 thread) by the vectorized runs
        start = time.perf_counter()
        path = os.path.join(tempfile.mkdtemp(), "model.h5")
        with open(path, "wb") as handle:
            handle.write(model_bytes_broadcast.value)
        model = tf.keras.models.load_model(path, compile=False)
        load_seconds.add(time.perf_counter() - start)
        start, count = time.perf_counter(), 0
        for row in rows:
            fields = row.asDict().copy()
            log_sales = model.predict_on_batch([np.array([[row[col]]]) for col in feature_cols])[0]
            fields["Sales"] = math.exp(float(log_sales[0]))
            count += 1
            yield Row(**fields)
        loop_seconds.add(time.perf_counter() - start)
        loop_rows.add(count)
    return fn


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    mem_kb = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1),
            "python": platform.python_version(), "platform": platform.platform()}


def main() -> int:
    args = parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-predict-")
    # The jobs load models only from the storage root's runs/ or models/ (rossmann_jobs/model/trust.py).
    os.environ[STORAGE_ROOT_ENV] = workdir
    features_uri, model_uri = storage.join(workdir, "features"), storage.join(workdir, "runs", "model")
    started = time.perf_counter()
    test, validation = frames()
    write_features(features_uri, test, validation)
    reference_h5 = write_model(model_uri)
    raw_uri = write_raw_test(storage.join(workdir, "raw"), test)
    setup_s = time.perf_counter() - started
    open_test_rows = int(test["Open"].ne(0).fillna(True).sum())
    inferred_rows = open_test_rows + len(validation)

    spark = build_spark_session("bench-predict", {"spark.master": "local[2]", "spark.ui.enabled": "false",
                                                  "spark.sql.shuffle.partitions": "8"})
    load_before = os.getloadavg()
    results: dict = {}
    try:
        for label in ("job_cold", "job_warm"):
            start = time.perf_counter()
            manifest = predict.run_predict(spark, model_uri, features_uri, storage.join(workdir, f"out-{label}"),
                                   raw_uri=raw_uri)
            results[label] = {"wall_s": time.perf_counter() - start, "timings_s": manifest["summary"]["timings_s"],
                              "rows": manifest["summary"]["rows"]}

        model = BroadcastModel(spark, open_model(model_uri))
        features_attempt = storage.committed_uri(features_uri)
        inputs = (spark.read.parquet(storage.spark_uri(storage.join(features_attempt, TEST_DIR)))
                  .filter("Open IS NULL OR Open != 0").select("StoreId", "Date", *FEATURE_COLS)
                  .unionByName(spark.read.parquet(storage.spark_uri(storage.join(features_attempt, VALIDATION_DIR)))
                               .select("StoreId", "Date", *FEATURE_COLS)))
        start = time.perf_counter()
        with_log_forecast(inputs, model, ["StoreId", "Date"]).write.format("noop").mode("overwrite").save()
        results["vectorized_inference_warm"] = {"wall_s": time.perf_counter() - start, "rows": inferred_rows}

        sc = spark.sparkContext
        loop_s, loop_rows, load_s = sc.accumulator(0.0), sc.accumulator(0), sc.accumulator(0.0)
        broadcast = sc.broadcast(reference_h5)
        sample = inputs.limit(args.sample_rows).repartition(2)
        start = time.perf_counter()
        sample.rdd.mapPartitions(row_at_a_time(broadcast, FEATURE_COLS, loop_s, loop_rows, load_s)).count()
        results["row_at_a_time_sample"] = {"wall_s": time.perf_counter() - start, "rows": loop_rows.value,
                                           "loop_s_summed_over_tasks": loop_s.value,
                                           "model_load_s_summed_over_tasks": load_s.value}
        model.destroy()
        broadcast.destroy()
    finally:
        spark.stop()

    parallelism = 2
    per_row_s = results["row_at_a_time_sample"]["loop_s_summed_over_tasks"] / results["row_at_a_time_sample"]["rows"]
    row_rate = parallelism / per_row_s
    vector_rate = inferred_rows / results["vectorized_inference_warm"]["wall_s"]
    job_rate = {label: inferred_rows / results[label]["timings_s"]["forecast and write predictions"]
                for label in ("job_cold", "job_warm")}
    summary = {
        "rows": {"test": len(test), "test_forecast": open_test_rows, "validation": len(validation),
                 "inferred": inferred_rows},
        "rows_per_s": {"vectorized_inference_warm": vector_rate,
                       "job_forecast_step_cold": job_rate["job_cold"], "job_forecast_step_warm": job_rate["job_warm"],
                       "row_at_a_time_extrapolated": row_rate},
        "row_at_a_time_full_scale_extrapolated_s": inferred_rows / row_rate,
        "speedup_vectorized_vs_row_at_a_time": vector_rate / row_rate,
        "speedup_job_cold_forecast_step_vs_row_at_a_time": job_rate["job_cold"] / row_rate,
    }
    document = {"benchmark": "predict", "machine": machine(), "spark_master": "local[2]",
                "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "setup_s": setup_s,
                "sample_rows": args.sample_rows, "results": results, "summary": summary}
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as handle:
        json.dump(document, handle, indent=2, default=str)

    print(f"\npredict benchmark: {inferred_rows:,} rows inferred ({open_test_rows:,} open test + "
          f"{len(validation):,} validation), local[2], load avg {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"{'measurement':58} {'seconds':>9} {'rows/s':>10}")
    table = [
        ("predict job end to end, cold workers (whole run)", results["job_cold"]["wall_s"], None),
        ("  its forecast + write predictions step", results["job_cold"]["timings_s"]["forecast and write predictions"],
         job_rate["job_cold"]),
        ("predict job end to end, warm workers (whole run)", results["job_warm"]["wall_s"], None),
        ("  its forecast + write predictions step", results["job_warm"]["timings_s"]["forecast and write predictions"],
         job_rate["job_warm"]),
        ("vectorized inference only (mapInPandas -> noop), warm", results["vectorized_inference_warm"]["wall_s"],
         vector_rate),
        (f"row-at-a-time, measured on {loop_rows.value} rows (loop only)",
         results["row_at_a_time_sample"]["loop_s_summed_over_tasks"] / parallelism, row_rate),
        ("row-at-a-time, EXTRAPOLATED to all rows", inferred_rows / row_rate, row_rate),
    ]
    for name, seconds, rate in table:
        print(f"{name:58} {seconds:9.1f} {'' if rate is None else f'{rate:10,.0f}'}")
    print(f"speedup vs row-at-a-time: vectorized inference {summary['speedup_vectorized_vs_row_at_a_time']:,.0f}x, "
          f"cold job's forecast step {summary['speedup_job_cold_forecast_step_vs_row_at_a_time']:,.0f}x")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
