"""Load the Keras model at most once per Python worker process, keyed by its (immutable, committed) URI."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from typing import Callable

from rossmann_jobs.features.spec import FEATURE_COLS
from rossmann_jobs.forecast.inputs import ForecastInputError
from rossmann_jobs.output_layout import MODEL_FILE
from rossmann_jobs.spark_session import configure_logging

log = logging.getLogger("rossmann.forecast")

# Survives across tasks because Spark reuses Python workers (spark.python.worker.reuse, on by default).
_MODELS: dict[str, object] = {}


def configure_tensorflow(threads: int) -> None:
    """CPU only, `threads` intra-op threads: executors share cores with other tasks. Only possible before TF runs."""
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # TF already initialised in this process: its settings stay
        log.info("TensorFlow already initialised in pid %d; keeping its thread settings", os.getpid())


def check_model_inputs(input_names: list[str], model_uri: str) -> None:
    if sorted(input_names) != sorted(FEATURE_COLS):
        raise ForecastInputError(
            f"{model_uri}: model inputs {sorted(input_names)} do not match the feature spec {sorted(FEATURE_COLS)} "
            "(one input per FEATURE_COLS column, named as the column).")


def load_model(model_uri: str, model_bytes: Callable[[], bytes], threads: int = 1):
    """The model at model_uri; `model_bytes` (the .h5 content) is only called the first time in this process."""
    if model_uri in _MODELS:
        return _MODELS[model_uri]
    if not logging.getLogger().handlers:  # a fresh Python worker: its stderr lands in the executor log
        configure_logging()
    configure_tensorflow(threads)
    import tensorflow as tf

    start = time.perf_counter()
    local_dir = tempfile.mkdtemp(prefix="rossmann-model-")
    try:
        local_file = os.path.join(local_dir, MODEL_FILE)
        with open(local_file, "wb") as handle:
            handle.write(model_bytes())
        model = tf.keras.models.load_model(local_file, compile=False)  # reads the whole file: the copy can go
    finally:
        shutil.rmtree(local_dir, ignore_errors=True)
    check_model_inputs(list(model.input_names), model_uri)
    _MODELS[model_uri] = model
    log.info("loaded model %s in pid %d in %.1f s", model_uri, os.getpid(), time.perf_counter() - start)
    return model
