"""Horovod's per-run secret key stays secret: how the train job calls horovod.spark.run.

horovod.spark.run makes a fresh 32-byte key per call (horovod/runner/common/util/secret.py), sends it to the Spark
tasks inside the task closure and to the worker processes as the env var _HOROVOD_SECRET_KEY, and HMAC-signs every
driver/task service message with it. Horovod prints the commands it runs at verbose >= 2 and the task environment at
verbose >= 3, masking only variables named *SECRET* (so AWS_SESSION_TOKEN would be printed): the job must stay below.
"""
from __future__ import annotations

import horovod.runner.launch
import horovod.spark
import horovod.spark.runner
from horovod.runner.common.util import secret

from rossmann_jobs import train


def test_train_calls_horovod_quietly_and_sends_no_credentials(monkeypatch, horovod_binding_restored):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret-value")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "not-a-real-session-token")
    calls = []
    # Only the call is recorded: what horovod.spark.run does is exercised by the train job tests.
    monkeypatch.setattr(horovod.spark, "run", lambda fn, **kwargs: calls.append((fn, kwargs)) or [{}])
    # run_horovod changes two of Horovod's module globals (training/horovod_launch.py): restored afterwards.
    monkeypatch.setattr(horovod.spark.runner, "_make_mapper", horovod.spark.runner._make_mapper)
    monkeypatch.setattr(horovod.runner.launch, "gloo_built", horovod.runner.launch.gloo_built)
    config = object()
    train.run_horovod(config, num_proc=2, executable="/executors/env/bin/python")
    [(fn, kwargs)] = calls
    assert kwargs["executable"] == "/executors/env/bin/python"   # the ranks' Python, not necessarily the driver's
    assert fn is train.train_fn and kwargs["args"] == (config,) and kwargs["num_proc"] == 2
    assert kwargs["verbose"] < 2
    assert set(kwargs["env"]) == set(train.WORKER_TIMEOUT_ENV)  # timeouts only: no credentials, no key
    assert secret.HOROVOD_SECRET_KEY not in kwargs["env"]
    assert kwargs["nics"] == {"lo"}   # the embedded stack's default: loopback (training/network.py)


def test_every_run_gets_a_fresh_random_key():
    keys = {secret.make_secret_key() for _ in range(3)}
    assert len(keys) == 3 and all(len(key) == secret.SECRET_LENGTH for key in keys)
    message = b"driver -> task"
    digest = secret.compute_digest(keys.pop(), message)
    assert not any(secret.check_digest(other, message, digest) for other in keys)
