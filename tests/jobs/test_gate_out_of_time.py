"""The quality gate validates out of time: a challenger biased on the weeks just before D is not promoted over an
unbiased champion, though it wins on Horovod's year-earlier window (which lies inside the training period).

Real prepare runs (both --validation-window rules) on one generated drop, one model fitted in-process, and the
train job's gate scores (training/gate_scores.py) and the DAG's decision (plugins/rossmann/gate.py) on them.
"""
from __future__ import annotations

import json
import math
import sys
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from rossmann_jobs import storage
from rossmann_jobs.features import split
from rossmann_jobs.features.spec import FEATURE_COLS, LABEL_COL
from rossmann_jobs.prepare import run_prepare
from rossmann_jobs.synth.cli import land
from rossmann_jobs.synth.dataset import SynthConfig
from rossmann_jobs.training import checkpoint
from rossmann_jobs.training.feature_set import load_feature_set
from rossmann_jobs.training.params import TrainParams

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins"))
from rossmann.gate import decide_promotion  # noqa: E402  (pure: standard library and the jobs' output layout)

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


def fitted_model(features):
    """A model fitted on the train rows outside both validation windows (so neither window is seen in training)."""
    import tensorflow as tf

    from rossmann_jobs.training.model import build_model

    recent, earlier = features[split.RECENT], features[split.YEAR_EARLIER]
    train = frame(recent.train_files)
    train = train[train["Date"].isin(set(frame(earlier.train_files)["Date"]))]
    tf.keras.utils.set_random_seed(5)
    model = build_model(recent.vocab_sizes, recent.max_sales, TrainParams(hidden_units=(64, 32), embedding_dim=4,
                                                                          dropout=0.1))
    model.compile(optimizer=tf.keras.optimizers.Adam(3e-3), loss="mae")
    model.fit(inputs_of(train), train[LABEL_COL].to_numpy(), batch_size=256, epochs=25, verbose=0)
    return model


def biased(model, vocabularies, factor: float, recent_only: bool):
    """model x factor on every row, or only on the rows dated in the recent window (2015-06-14 .. 2015-07-31),
    in stock Keras layers: a fixed 0/1 embedding per date part picks the rows."""
    import tensorflow as tf

    layers = tf.keras.layers
    by_name = {tensor.name.split(":")[0]: tensor for tensor in model.inputs}

    def flag(col, accepted):
        values = [None, *vocabularies[col]]
        weights = np.array([[1.0 if value is not None and accepted(int(value)) else 0.0] for value in values])
        lookup = layers.Embedding(len(values), 1, trainable=False, name=f"flag_{col}_{accepted.__name__}")
        out = layers.Reshape((1,))(lookup(by_name[col]))
        lookup.set_weights([weights])
        return out

    if recent_only:
        def july(month): return month == 7
        def june(month): return month == 6
        def late(day): return day >= 14
        def this_year(year): return year == 2015
        in_window = layers.Multiply()([flag("Year", this_year), layers.Add()([
            flag("Month", july), layers.Multiply()([flag("Month", june), flag("Day", late)])])])
        shift = layers.Rescaling(math.log(factor))(in_window)
        output = layers.Add()([model.output, shift])
    else:
        output = layers.Rescaling(1.0, offset=math.log(factor))(model.output)
    return tf.keras.Model(model.inputs, output)


@pytest.fixture(scope="module")
def gate_models(features, tmp_path_factory):
    root = tmp_path_factory.mktemp("gate-oot-models")
    good = fitted_model(features)
    vocabularies = features[split.RECENT].metadata["vocabularies"]
    paths = {}
    for name, factor, recent_only in (("challenger", RECENT_BIAS, True), ("champion", CHAMPION_BIAS, False)):
        model_dir = root / name / "model"
        model_dir.mkdir(parents=True)
        checkpoint.save_model_h5(biased(good, vocabularies, factor, recent_only), str(model_dir / "model.h5"))
        (model_dir / "artifact.json").write_text(json.dumps({"vocabularies": vocabularies,
                                                              "feature_order": FEATURE_COLS}))
        paths[name] = str(root / name)
    return {**paths, "challenger_file": str(root / "challenger" / "model" / "model.h5")}


def test_the_biased_challenger_wins_a_year_earlier_but_is_not_promoted_out_of_time(spark, features, gate_models):
    from rossmann_jobs.training.gate_scores import gate_scores

    champion = {"model_uri": gate_models["champion"], "as_of": "2015-07-30"}
    scores, decisions = {}, {}
    for rule, feature_set in features.items():
        scores[rule] = gate_scores(spark, feature_set, gate_models["challenger_file"], gate_models["champion"])
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
    assert storage.exists(gate_models["challenger_file"])
