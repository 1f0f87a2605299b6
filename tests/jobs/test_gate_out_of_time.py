"""The quality gate validates out of time: a challenger biased on the weeks just before D is not promoted over an
unbiased champion, though it wins on Horovod's year-earlier window (which lies inside the training period).

Real prepare runs (both --validation-window rules) on one generated drop, two models fitted in-process, and the
train job's gate scores (gate_scores.py) and the DAG's decision (plugins/rossmann/gate.py) on them.
"""
from __future__ import annotations

import math
from datetime import date

import numpy as np
import pytest

from rossmann.gate import decide_promotion  # noqa: E402  (pure: standard library and the jobs' output layout)
from rossmann_jobs import storage
from rossmann_jobs.features import split
from rossmann_jobs.features.spec import FEATURE_COLS, LABEL_COL
from rossmann_jobs.model.params import TrainParams
from rossmann_jobs.model.store import open_model
from rossmann_jobs.model.trust import STORAGE_ROOT_ENV
from rossmann_jobs.prepare import run_prepare
from rossmann_jobs.synth.cli import land
from rossmann_jobs.synth.dataset import SynthConfig
from rossmann_jobs.training.feature_set import load_feature_set
from tests.jobs.predict_fixtures import commit_model

AS_OF = date(2015, 7, 31)
RECENT_BIAS, CHAMPION_BIAS = 1.15, 1.04     # the challenger: +15 % on the last 48 days; the champion: +4 % on all


@pytest.fixture(scope="module")
def features(spark, tmp_path_factory):
    """One drop prepared with each validation rule: the same rows, split differently."""
    root = tmp_path_factory.mktemp("gate-oot")
    land(str(root / "drops"), AS_OF, AS_OF, SynthConfig(stores=20, seed=11))
    drop = str(root / "drops" / AS_OF.isoformat())
    out = {}
    for rule in split.VALIDATION_RULES:
        run_prepare(spark, drop, str(root / rule), AS_OF, num_shards=2, validation_rule=rule)
        out[rule] = load_feature_set(str(root / rule))
    return out


def frame(files):
    import pyarrow.parquet as pq

    return pq.ParquetDataset(files).read().to_pandas()


def inputs_of(rows):
    return {col: rows[col].to_numpy().reshape(-1, 1) for col in FEATURE_COLS}


def recent_window(rows) -> np.ndarray:
    """Whether each row is dated in the recent validation window (2015-06-14 .. 2015-07-31)."""
    dates = rows["Date"].astype("datetime64[ns]")
    return ((dates >= np.datetime64("2015-06-14")) & (dates <= np.datetime64("2015-07-31"))).to_numpy()


def fitted_model(features, rows, log_shift: np.ndarray):
    """A model of the train job's architecture fitted on `rows` with log(Sales) + log_shift as the label."""
    import tensorflow as tf

    from rossmann_jobs.model.architecture import build_model

    recent = features[split.RECENT]
    tf.keras.utils.set_random_seed(5)
    model = build_model(recent.vocab_sizes, recent.max_sales, TrainParams(hidden_units=(64, 32), embedding_dim=4,
                                                                          dropout=0.1))
    model.compile(optimizer=tf.keras.optimizers.Adam(3e-3), loss="mae")
    model.fit(inputs_of(rows), rows[LABEL_COL].to_numpy() + log_shift, batch_size=256, epochs=25, verbose=0)
    return model


@pytest.fixture(scope="module")
def gate_models(features, tmp_path_factory):
    """Models are data (params + weights of the train job's network), so the biases are learned, not wired in:
    the challenger was fitted on every row outside the year-earlier window with the recent window's Sales
    +15 % (it learned a bump on the weeks just before D); the champion on the rows outside both windows with
    every Sales +4 %."""
    recent, earlier = features[split.RECENT], features[split.YEAR_EARLIER]
    outside_earlier = frame(earlier.train_files)
    outside_both = outside_earlier[outside_earlier["Date"].isin(set(frame(recent.train_files)["Date"]))]
    challenger = fitted_model(features, outside_earlier,
                              np.where(recent_window(outside_earlier), math.log(RECENT_BIAS), 0.0))
    champion = fitted_model(features, outside_both, np.full(len(outside_both), math.log(CHAMPION_BIAS)))
    root = str(tmp_path_factory.mktemp("gate-oot-root"))
    artifact = {"feature_order": FEATURE_COLS, "vocab_sizes": recent.vocab_sizes, "max_sales": recent.max_sales,
                "vocabularies": recent.metadata["vocabularies"],
                "params": TrainParams(hidden_units=(64, 32), embedding_dim=4, dropout=0.1).to_dict()}
    challenger_out = storage.join(root, "runs", AS_OF.isoformat(), "r1", "model")
    commit_model(challenger_out, challenger, artifact)
    champion_out = storage.join(root, "runs", "2015-07-30", "r0", "model")
    commit_model(champion_out, champion, artifact)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STORAGE_ROOT_ENV, root)
        yield {"challenger": open_model(challenger_out), "champion": champion_out}


def test_the_biased_challenger_wins_a_year_earlier_but_is_not_promoted_out_of_time(spark, features, gate_models):
    from rossmann_jobs.gate_scores import gate_scores

    champion = {"model_uri": gate_models["champion"], "as_of": "2015-07-30"}
    scores, decisions = {}, {}
    for rule, feature_set in features.items():
        scores[rule] = gate_scores(spark, feature_set, gate_models["challenger"], gate_models["champion"])
        decisions[rule] = decide_promotion(scores[rule], champion, 0.0, baseline_tolerance=1.0)
    year_earlier, recent = scores[split.YEAR_EARLIER], scores[split.RECENT]

    # A year earlier the challenger is the unbiased model and beats the uniformly biased champion: promoted.
    assert year_earlier["challenger"] < year_earlier["champion"], year_earlier
    assert decisions[split.YEAR_EARLIER]["promoted"], decisions
    # On the last 48 days its +15 % bias shows, and the champion keeps serving.
    assert recent["challenger"] > recent["champion"], recent
    assert not decisions[split.RECENT]["promoted"], decisions
    assert recent["challenger"] > year_earlier["challenger"] * 1.2
    # The recent rows are the last 48 days up to D; the year-earlier ones the horizon a year back.
    windows = {rule: fs.metadata["validation_window"] for rule, fs in features.items()}
    assert (windows[split.RECENT]["start"], windows[split.RECENT]["end"]) == ("2015-06-14", "2015-07-31")
    assert (windows[split.YEAR_EARLIER]["start"], windows[split.YEAR_EARLIER]["end"]) == ("2014-08-02", "2014-09-17")
    assert recent["validation_rows"] > 0 and year_earlier["validation_rows"] > 0
    assert recent["champion_model_uri"] == gate_models["champion"] and "champion_incompatible" not in recent
