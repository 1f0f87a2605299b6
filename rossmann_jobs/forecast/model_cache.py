"""Build the Keras model at most once per Python worker process, keyed by its (immutable, committed) URI."""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable

from rossmann_jobs.job_protocol import configure_logging
from rossmann_jobs.model_files import build_model

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


def load_model(model_uri: str, model_content: Callable[[], tuple[dict[str, Any], bytes]], threads: int = 1):
    """The model at model_uri; `model_content` ((artifact, weights.npz bytes), checked by the driver) is only
    called the first time in this process. The network is built by this code: nothing of the file is executed."""
    if model_uri in _MODELS:
        return _MODELS[model_uri]
    if not logging.getLogger().handlers:  # a fresh Python worker: its stderr lands in the executor log
        configure_logging()
    configure_tensorflow(threads)
    start = time.perf_counter()
    artifact, weights = model_content()
    model = build_model(artifact, weights, model_uri)
    _MODELS[model_uri] = model
    log.info("loaded model %s in pid %d in %.1f s", model_uri, os.getpid(), time.perf_counter() - start)
    return model
