"""docs/deploy.md's supported-versions table names what the set-up actually pins and installs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from images import requirement_pins, shell_assignment  # scripts/compose/images.py: what the image builds read

REPO = Path(__file__).resolve().parents[2]


def versions_table(text: str) -> dict[str, str]:
    """component -> the 'tested version' cell of the section's table."""
    section = text.split("## Supported versions", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and line.startswith("|") and not set(cells[1]) <= set("-") and cells[0] != "component":
            rows[cells[0]] = cells[1]
    return rows


def table_mismatches(table: dict[str, str], expected: dict[str, list[str]]) -> list[str]:
    """component: each expected version string its row does not contain."""
    return [f"{component}: {version!r} not in {table.get(component)!r}"
            for component, versions in expected.items() for version in versions
            if version not in table.get(component, "")]


def expected_versions() -> dict[str, list[str]]:
    airflow, jobs = (requirement_pins(REPO / "constraints" / name) for name in ("airflow.txt", "jobs.txt"))
    setup = REPO / "scripts" / "setup_env.sh"
    jars = re.search(r"^S3A_JARS=\((.*)\)", setup.read_text(), re.MULTILINE).group(1)
    hadoop_aws, sdk_bundle = (re.search(rf"{name}-([0-9.]+)\.jar", jars).group(1)
                              for name in ("hadoop-aws", "aws-java-sdk-bundle"))
    minio = re.search(r"image: quay\.io/minio/minio:(\S+)", (REPO / "docker-compose.yaml").read_text()).group(1)
    return {
        "Apache Airflow": [airflow["apache-airflow"], airflow["apache-airflow-task-sdk"]],
        "apache-airflow-providers-apache-spark": [airflow["apache-airflow-providers-apache-spark"]],
        "apache-airflow-providers-amazon": [airflow["apache-airflow-providers-amazon"]],
        "Spark (pyspark, the jobs and the executors)": [jobs["pyspark"]],
        "S3A": [hadoop_aws, sdk_bundle],
        "TensorFlow": [shell_assignment(setup, "TF_VERSION"), jobs["tensorflow-cpu"], jobs["numpy"]],
        "Horovod": [shell_assignment(setup, "HOROVOD_VERSION")],
        "S3 server": [minio, jobs["moto"]],
    }


def test_the_versions_table_names_the_pinned_versions():
    table = versions_table((REPO / "docs" / "deploy.md").read_text())
    assert table_mismatches(table, expected_versions()) == []


def test_the_versions_check_sees_a_stale_row():
    table = versions_table((REPO / "docs" / "deploy.md").read_text())
    expected = expected_versions()
    stale = {**table, "Spark (pyspark, the jobs and the executors)": "3.4.1"}
    assert table_mismatches(stale, expected) == [
        f"Spark (pyspark, the jobs and the executors): {expected['Spark (pyspark, the jobs and the executors)'][0]!r}"
        " not in '3.4.1'"]


@pytest.mark.parametrize("component", ["Python", "Java", "PostgreSQL (Airflow metadata)", "Docker"])
def test_the_versions_table_has_a_row_for(component):
    assert versions_table((REPO / "docs" / "deploy.md").read_text()).get(component)
