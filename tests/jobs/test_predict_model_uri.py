"""How the predict job resolves --model: a committed train output, an attempt prefix, or the champion's pinned copy."""
from __future__ import annotations

import pytest

from rossmann_jobs import storage
from rossmann_jobs.predict import model_attempt_uri


def write_attempt(out_uri: str, content: bytes) -> str:
    attempt = storage.new_attempt_uri(out_uri)
    storage.write_bytes(storage.join(attempt, "model", "model.h5"), content)
    storage.write_json(storage.join(attempt, "model", "artifact.json"), {"feature_order": []})
    return attempt


def test_an_output_prefix_resolves_to_its_committed_attempt(tmp_path):
    out = str(tmp_path / "model")
    first = write_attempt(out, b"first")
    storage.commit(out, first)
    assert model_attempt_uri(out) == first
    second = write_attempt(out, b"second")
    storage.commit(out, second)
    assert model_attempt_uri(out) == second


def test_an_attempt_or_a_pinned_copy_is_taken_as_is(tmp_path):
    out = str(tmp_path / "model")
    attempt = write_attempt(out, b"weights")
    storage.commit(out, attempt)
    assert model_attempt_uri(attempt + "/") == attempt
    pinned = str(tmp_path / "champions" / "2015-07-31" / "run" / attempt.rsplit("/", 1)[-1])
    storage.upload_dir(storage.download_dir(attempt, str(tmp_path / "copy")), pinned)
    assert model_attempt_uri(pinned) == pinned
    assert storage.read_bytes(storage.join(model_attempt_uri(pinned), "model", "model.h5")) == b"weights"


def test_an_uncommitted_output_is_refused_with_a_clear_error(tmp_path):
    out = str(tmp_path / "model")
    write_attempt(out, b"half-done")  # written but never committed: not a model to forecast with
    with pytest.raises(storage.OutputNotCommittedError, match=r"neither a committed train output.*model/model\.h5"):
        model_attempt_uri(out)
