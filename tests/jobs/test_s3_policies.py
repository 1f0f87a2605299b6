"""The compose stack's S3 identities (docker/minio/minio-init.sh): each policy allows exactly its component's
prefixes, and docs/deploy.md shows the same documents for IAM."""
from __future__ import annotations

import json
import re
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUCKET_ARN = "arn:aws:s3:::BUCKET"


def script_policies() -> dict[str, dict]:
    """minio-init's policy documents by name, the bucket ARN spelt BUCKET as in the docs."""
    script = (REPO / "docker" / "minio" / "minio-init.sh").read_text()
    blocks = re.findall(r"^policy (\S+) .*?<<POLICY\n(.*?)\nPOLICY$", script, re.S | re.M)
    return {name.removeprefix("rossmann-"): json.loads(body.replace("$B", BUCKET_ARN)) for name, body in blocks}


def allows(policy: dict, action: str, key: str | None = None, prefix: str | None = None) -> bool:
    """IAM's answer for this subset (Allow statements only; Action, Resource and StringLike s3:prefix wildcards)."""
    resource = BUCKET_ARN if key is None else f"{BUCKET_ARN}/{key}"
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow" and set(statement) <= {"Effect", "Action", "Resource", "Condition"}
        prefixes = statement.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
        if (any(fnmatchcase(action, pattern) for pattern in statement["Action"])
                and any(fnmatchcase(resource, pattern) for pattern in statement["Resource"])
                and (prefixes is None or (prefix is not None and any(fnmatchcase(prefix, p) for p in prefixes)))):
            return True
    return False


# (identity, action, key or None for the bucket, list prefix, allowed)
CASES = [
    ("lander", "s3:PutObject", "raw/2015-07-31/train.csv", None, True),
    ("lander", "s3:GetObject", "raw/2015-07-31/_SUCCESS", None, True),
    ("lander", "s3:ListBucket", None, "raw/2015-07-31/", True),
    ("lander", "s3:PutObject", "models/champion.json", None, False),
    ("lander", "s3:PutObject", "models/champions/2015-07-31/r/a/model/weights.npz", None, False),
    ("lander", "s3:PutObject", "runs/2015-07-31/r/model/_SUCCESS", None, False),
    ("lander", "s3:GetObject", "runs/2015-07-31/r/model/_SUCCESS", None, False),
    ("lander", "s3:GetObject", "models/champion.json", None, False),
    ("lander", "s3:GetObject", "forecast/latest.json", None, False),
    ("lander", "s3:ListBucket", None, "", False),
    ("lander", "s3:ListBucket", None, "models/", False),
    ("lander", "s3:DeleteObject", "raw/2015-07-31/train.csv", None, False),
    ("jobs", "s3:GetObject", "raw/2015-07-31/train.csv", None, True),
    ("jobs", "s3:GetObject", "models/champions/2015-07-31/r/a/model/weights.npz", None, True),
    ("jobs", "s3:PutObject", "runs/2015-07-31/r/model/attempts/a/model/weights.npz", None, True),
    ("jobs", "s3:DeleteObject", "runs/2015-07-31/r/model/checkpoints/epoch-1/state.json", None, True),
    ("jobs", "s3:PutObject", "forecast/scores/summary.json", None, True),
    ("jobs", "s3:PutObject", "models/champions/2015-07-31/r/a/model/weights.npz", None, False),
    ("jobs", "s3:PutObject", "models/champions/history/2015-07-31.json", None, False),
    ("jobs", "s3:PutObject", "forecast/latest.json", None, False),
    # Published forecasts: the score job reads them; only Airflow's identity writes them, nobody deletes them.
    ("jobs", "s3:GetObject", "forecast/published/2015-07-31/r-0123abcd/a/predictions/Split=test/part-0.parquet",
     None, True),
    ("jobs", "s3:PutObject", "forecast/published/2015-07-31/r-0123abcd/a/submission.csv", None, False),
    ("jobs", "s3:DeleteObject", "forecast/published/2015-07-31/r-0123abcd/a/submission.csv", None, False),
    ("jobs", "s3:GetObject", "forecast/history/2015-07-31/r-0123abcd.json", None, False),
    ("airflow", "s3:PutObject", "forecast/published/2015-07-31/r-0123abcd/a/submission.csv", None, True),
    ("airflow", "s3:DeleteObject", "forecast/published/2015-07-31/r-0123abcd/a/submission.csv", None, False),
    ("lander", "s3:GetObject", "forecast/published/2015-07-31/r-0123abcd/a/submission.csv", None, False),
    ("jobs", "s3:PutObject", "raw/2015-07-31/train.csv", None, False),
    ("airflow", "s3:GetObject", "raw/2015-07-31/_SUCCESS", None, True),
    ("airflow", "s3:GetObject", "runs/2015-07-31/r/model/_SUCCESS", None, True),
    ("airflow", "s3:PutObject", "models/champions/2015-07-31/r/a/model/weights.npz", None, True),
    ("airflow", "s3:PutObject", "forecast/history/2015-07-31/r.json", None, True),
    ("airflow", "s3:PutObject", "runs/2015-07-31/r/scoring/forecasts.json", None, True),
    ("airflow", "s3:PutObject", "runs/2015-07-31/r/model/_SUCCESS", None, False),
    ("airflow", "s3:PutObject", "raw/2015-07-31/_SUCCESS", None, False),
    ("airflow", "s3:DeleteObject", "models/champion.json", None, False),
    # Task logs (remote logging): Airflow's identity writes and reads them; no job or supplier can read or forge one.
    ("airflow", "s3:PutObject", "logs/dag_id=rossmann_forecast/run_id=r/task_id=predict/attempt=1.log", None, True),
    ("airflow", "s3:GetObject", "logs/dag_id=rossmann_forecast/run_id=r/task_id=predict/attempt=1.log", None, True),
    ("jobs", "s3:PutObject", "logs/dag_id=rossmann_forecast/run_id=r/task_id=predict/attempt=1.log", None, False),
    ("jobs", "s3:GetObject", "logs/dag_id=rossmann_forecast/run_id=r/task_id=predict/attempt=1.log", None, False),
    ("lander", "s3:PutObject", "logs/dag_id=rossmann_forecast/run_id=r/task_id=predict/attempt=1.log", None, False),
]


@pytest.mark.parametrize("identity, action, key, prefix, allowed", CASES,
                         ids=[f"{c[0]}-{c[1].split(':')[1]}-{c[2] or c[3]!r}" for c in CASES])
def test_each_identity_reaches_only_its_prefixes(identity, action, key, prefix, allowed):
    assert allows(script_policies()[identity], action, key, prefix) is allowed


def test_the_check_would_catch_the_one_policy_for_everything():
    """Negative control: the single bucket-wide policy every component shared before lets the lander plant a model
    and read every run."""
    shared = {"Statement": [
        {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"],
         "Resource": [BUCKET_ARN]},
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                                       "s3:ListMultipartUploadParts"], "Resource": [f"{BUCKET_ARN}/*"]}]}
    assert allows(shared, "s3:PutObject", "models/champions/2015-07-31/r/a/model/weights.npz")
    assert allows(shared, "s3:GetObject", "runs/2015-07-31/r/model/_SUCCESS")
    assert allows(shared, "s3:ListBucket", None, "")


def test_the_docs_show_the_same_policies():
    docs = (REPO / "docs" / "deploy.md").read_text()
    section = docs[docs.index("## S3 identities"):]
    shown = [json.loads(block) for block in re.findall(r"```json\n(.*?)\n```", section, re.S)[:3]]
    policies = script_policies()
    assert shown == [policies["lander"], policies["jobs"], policies["airflow"]]
