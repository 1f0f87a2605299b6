"""Warm start: embedding rows follow their values into today's vocabularies, unseen values start fresh, the dense
layers carry over, and an incompatible model is refused with a reason."""
from __future__ import annotations

import numpy as np
import pytest

from rossmann_jobs import storage
from rossmann_jobs.features.spec import CATEGORICAL_COLS
from rossmann_jobs.model import files as model_files
from rossmann_jobs.model.params import TrainParams
from rossmann_jobs.model.trust import DIGESTS_KEY, STORAGE_ROOT_ENV
from rossmann_jobs.training.feature_set import FeatureSet
from rossmann_jobs.training.warm_start import FRESH_ROW, embedding_rows, load_weights, plan_warm_start
from testkit.feature_fixtures import VOCAB_SIZES

SMALL = TrainParams(hidden_units=(16, 8), embedding_dim=3)
OLD_VOCABULARIES = {col: [f"{col}-{i}" for i in range(1, VOCAB_SIZES[col])] for col in CATEGORICAL_COLS}
# Today's Store vocabulary: one store closed ("Store-2" gone), one opened ("Store-new", sorted in the middle).
NEW_STORES = ["Store-1", "Store-3", "Store-new", *OLD_VOCABULARIES["Store"][3:]]


def test_embedding_rows_follow_values_and_mark_unseen_ones_fresh():
    assert embedding_rows(["a", "c", "d"], ["a", "b", "c"]) == [0, 1, 3, FRESH_ROW]
    assert embedding_rows([], ["a"]) == [0]


def features_with(vocabularies: dict, max_sales: float = 20000.0) -> FeatureSet:
    spec = {"categorical": [{"name": col, "vocab_size": len(values) + 1} for col, values in vocabularies.items()]}
    return FeatureSet("f", "f/attempt", {"vocabularies": vocabularies, "feature_spec": spec, "max_sales": max_sales},
                      [], [])


@pytest.fixture(scope="module")
def earlier_model(tmp_path_factory):
    """A committed train output (model/artifact.json + weights.npz, digests in its manifest) with non-initial
    weights, under the storage root's runs/."""
    import tensorflow as tf

    from rossmann_jobs.model.architecture import build_model

    tf.keras.utils.set_random_seed(1)
    vocab_sizes = {col: len(v) + 1 for col, v in OLD_VOCABULARIES.items()}
    model = build_model(vocab_sizes, 20000.0, SMALL)
    rng = np.random.default_rng(2)
    model.set_weights([rng.normal(size=w.shape).astype(w.dtype) for w in model.get_weights()])
    root = str(tmp_path_factory.mktemp("root"))
    out = storage.join(root, "runs", "2015-07-30", "r", "model")
    attempt = storage.new_attempt_uri(out)
    digests = model_files.write_model(attempt, {
        "feature_order": model.input_names, "vocabularies": OLD_VOCABULARIES, "vocab_sizes": vocab_sizes,
        "max_sales": 20000.0, "params": SMALL.to_dict()}, model_files.weights_bytes(model))
    storage.commit(out, attempt, {DIGESTS_KEY: digests})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STORAGE_ROOT_ENV, root)
        yield out, model


def test_warm_start_copies_weights_and_reindexes_embeddings(earlier_model):
    import tensorflow as tf

    from rossmann_jobs.model.architecture import build_model

    attempt, earlier = earlier_model
    vocabularies = {**OLD_VOCABULARIES, "Store": NEW_STORES}
    plan, refusal = plan_warm_start(attempt, features_with(vocabularies, max_sales=22000.0), SMALL)
    assert refusal == "" and plan.fresh_rows() == {"Store": 1}
    assert plan.max_sales_ratio == pytest.approx(1.1)

    tf.keras.utils.set_random_seed(3)
    model = build_model({col: len(v) + 1 for col, v in vocabularies.items()}, 22000.0, SMALL)
    initial_store_rows = model.get_layer("emb_Store").get_weights()[0].copy()
    load_weights(model, plan)

    old_store, new_store = (m.get_layer("emb_Store").get_weights()[0] for m in (earlier, model))
    for index, value in enumerate(["<unknown>", *NEW_STORES]):
        if value == "Store-new":
            np.testing.assert_array_equal(new_store[index], initial_store_rows[index])   # fresh row kept
        else:
            old_index = 0 if index == 0 else OLD_VOCABULARIES["Store"].index(value) + 1
            np.testing.assert_array_equal(new_store[index], old_store[old_index])
    for name in ("dense_0", "dense_1", "sigmoid", "continuous_bn", "emb_DayOfWeek"):
        for new, old in zip(model.get_layer(name).get_weights(), earlier.get_layer(name).get_weights()):
            np.testing.assert_array_equal(new, old)


def test_incompatible_models_are_refused_with_the_reason(earlier_model):
    attempt, _ = earlier_model
    features = features_with(OLD_VOCABULARIES)
    plan, refusal = plan_warm_start(attempt, features, TrainParams(hidden_units=(32, 8), embedding_dim=3))
    assert plan is None and "architecture" in refusal and "[32, 8]" in refusal
    plan, refusal = plan_warm_start(attempt, features, TrainParams(hidden_units=(16, 8), embedding_dim=4))
    assert plan is None and "embedding_dim" in refusal
