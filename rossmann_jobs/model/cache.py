"""Build the model's forward pass at most once per Python worker process, keyed by its (immutable, committed) URI."""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable

from rossmann_jobs.job_protocol import configure_logging
from rossmann_jobs.model.forward_pass import ForwardPass

log = logging.getLogger("rossmann.forecast")

# Survives across tasks because Spark reuses Python workers (spark.python.worker.reuse, on by default).
_MODELS: dict[str, ForwardPass] = {}


def load_model(model_uri: str, model_content: Callable[[], tuple[dict[str, Any], bytes]]) -> ForwardPass:
    """The model at model_uri; `model_content` ((artifact, weights.npz bytes), checked by the driver) is only
    called the first time in this process. Plain arrays: nothing of the file is executed, and no TensorFlow."""
    if model_uri in _MODELS:
        return _MODELS[model_uri]
    if not logging.getLogger().handlers:  # a fresh Python worker: its stderr lands in the executor log
        configure_logging()
    start = time.perf_counter()
    artifact, weights = model_content()
    model = ForwardPass(artifact, weights, model_uri)
    _MODELS[model_uri] = model
    log.info("loaded model %s in pid %d in %.2f s", model_uri, os.getpid(), time.perf_counter() - start)
    return model
