"""How the jobs resolve a model URI: a committed train output, an attempt prefix, or the champion's pinned copy."""
from __future__ import annotations

import pytest

import predict_fixtures
from rossmann_jobs import storage
from rossmann_jobs.model.store import attempt_of, open_model
from rossmann_jobs.model.trust import encode_digests


def test_an_output_prefix_resolves_to_its_committed_attempt_and_its_digests(storage_root):
    out = storage.join(storage_root, "runs", "2015-07-31", "r", "model")
    first = predict_fixtures.write_model(out)
    assert attempt_of(out) == (storage.committed_uri(out), first)
    first_attempt = storage.committed_uri(out)
    second = predict_fixtures.write_model(out, model=predict_fixtures.build_model(predict_fixtures.vocabularies(), 3))
    assert attempt_of(out) == (storage.committed_uri(out), second) and storage.committed_uri(out) != first_attempt
    assert open_model(out).digests == second


def test_an_attempt_or_a_pinned_copy_is_taken_as_is(storage_root, tmp_path):
    out = storage.join(storage_root, "runs", "2015-07-31", "r", "model")
    digests = predict_fixtures.write_model(out)
    attempt = storage.committed_uri(out)
    assert attempt_of(attempt + "/") == (attempt, {})
    pinned = storage.join(storage_root, "models", "champions", "2015-07-31", "r", attempt.rsplit("/", 1)[-1])
    storage.upload_dir(storage.download_dir(attempt, str(tmp_path / "copy")), pinned)
    assert attempt_of(pinned) == (pinned, {})
    source = open_model(pinned, encode_digests(digests))   # a pinned copy needs the champion record's digests
    assert source.attempt == pinned and source.weights_bytes() == storage.read_bytes(
        storage.join(attempt, "model", "weights.npz"))


def test_an_uncommitted_output_is_refused_with_a_clear_error(storage_root):
    out = storage.join(storage_root, "runs", "2015-07-31", "r", "model")
    attempt = storage.new_attempt_uri(out)   # written but never committed: not a model to forecast with
    storage.write_bytes(storage.join(attempt, "model", "weights.npz"), b"half-done")
    with pytest.raises(storage.OutputNotCommittedError,
                       match=r"neither a committed train output.*model/artifact\.json"):
        attempt_of(out)
