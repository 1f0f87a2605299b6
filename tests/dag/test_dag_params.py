"""Bad DAG-run confs are refused before a run exists, by the validation a REST trigger or `dags trigger -c` gets."""
from __future__ import annotations

import pytest

from stack_helpers import DAG_ID, REPO_ROOT


@pytest.fixture(scope="module")
def serialized_dag():
    """The DAG as the API server sees it: serialized by the DAG processor, then deserialized."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    dag = DagBag(dag_folder=str(REPO_ROOT / "dags")).dags[DAG_ID]
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def validate_conf(serialized_dag, conf):
    # What SerializedDAG.create_dagrun does with a trigger's conf before it creates the run.
    return serialized_dag.params.deep_merge(conf).validate()


BAD_CONFS = [
    ({"epochs": -5}, "epochs"),
    ({"epochs": 0}, "epochs"),
    ({"epochs": "ten"}, "epochs"),
    ({"sample_rate": 1.5}, "sample_rate"),
    ({"sample_rate": 0}, "sample_rate"),
    ({"sample_rate": -0.1}, "sample_rate"),
    ({"num_proc": 0}, "num_proc"),
    ({"num_proc": 4096}, "num_proc"),
    ({"num_proc": 2.5}, "num_proc"),
    ({"batch_size": 0}, "batch_size"),
    ({"learning_rate": -1e-3}, "learning_rate"),
    ({"seed": -1}, "seed"),
    ({"promotion_tolerance": 5}, "promotion_tolerance"),
    ({"raw_drop_timeout_s": 0}, "raw_drop_timeout_s"),
    ({"hidden_units": "1000, 500"}, "hidden_units"),
    ({"hidden_units": "0,500"}, "hidden_units"),
    ({"hidden_units": ""}, "hidden_units"),
    ({"hidden_units": 500}, "hidden_units"),
    ({"as_of": "31.07.2015"}, "as_of"),
    ({"as_of": "2015-02-30"}, "as_of"),
    ({"max_staleness_days": -1}, "max_staleness_days"),
    ({"max_staleness_days": 1.5}, "max_staleness_days"),
    ({"max_staleness_days": "3"}, "max_staleness_days"),
    ({"max_staleness_days": 400}, "max_staleness_days"),
    ({"allow_unverified_drop": "no"}, "allow_unverified_drop"),
]


@pytest.mark.parametrize("conf, param", BAD_CONFS, ids=[f"{p}={c[p]!r}" for c, p in BAD_CONFS])
def test_a_bad_conf_is_refused_naming_the_param(serialized_dag, conf, param):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError) as error:
        validate_conf(serialized_dag, conf)
    assert f"Invalid input for param {param}:" in str(error.value)


def test_the_first_bad_param_is_named_even_when_others_are_fine(serialized_dag):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match="param sample_rate:"):
        validate_conf(serialized_dag, {"epochs": 3, "num_proc": 2, "sample_rate": 2})


def test_a_good_conf_overrides_only_what_it_names(serialized_dag):
    params = validate_conf(serialized_dag, {"epochs": 3, "sample_rate": 0.25, "as_of": "2015-06-30"})
    defaults = validate_conf(serialized_dag, {})
    assert (params["epochs"], params["sample_rate"], params["as_of"]) == (3, 0.25, "2015-06-30")
    assert {k: v for k, v in params.items() if k not in ("epochs", "sample_rate", "as_of")} == {
        k: v for k, v in defaults.items() if k not in ("epochs", "sample_rate", "as_of")}


def test_the_drop_contract_params_reach_prepare_with_the_jobs_defaults(serialized_dag):
    """max_staleness_days and allow_unverified_drop default to prepare's own defaults (one definition,
    rossmann_jobs/features/drop_settings.py) and render into the prepare task's arguments."""
    from jinja2 import Environment

    from rossmann_jobs.features import drop_settings

    defaults = validate_conf(serialized_dag, {})
    assert (defaults["max_staleness_days"], defaults["allow_unverified_drop"]) == (
        drop_settings.DEFAULT_MAX_STALENESS_DAYS, drop_settings.ALLOW_UNVERIFIED_DROP)
    from airflow.dag_processing.dagbag import DagBag

    args = DagBag(dag_folder=str(REPO_ROOT / "dags")).dags[DAG_ID].get_task("prepare_features").application_args
    flag = args.index("--max-staleness-days")
    environment = Environment()   # the spark-submit arguments render as text
    for conf, staleness, unverified in (({}, "0", "--allow-unverified-drop"),
                                        ({"max_staleness_days": 2, "allow_unverified_drop": False}, "2",
                                         "--no-allow-unverified-drop")):
        params = validate_conf(serialized_dag, conf)
        rendered = [environment.from_string(arg).render(params=params) if isinstance(arg, str) else arg
                    for arg in args[flag:flag + 3]]
        assert rendered == ["--max-staleness-days", staleness, unverified], conf
