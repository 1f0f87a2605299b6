"""The locks against constraints/advisories.toml: no lock brings back a fixed advisory's vulnerable version, every
justified one still applies, and docs/security.md shows exactly that list."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
ADVISORIES = tomllib.loads((REPO / "constraints" / "advisories.toml").read_text())["advisory"]
SETUP_ENV = (REPO / "scripts" / "setup_env.sh").read_text()


def locked_versions() -> dict[str, set[str]]:
    """Every version the project installs: both constraint files, horovod, the S3A jars and the setuptools floor."""
    versions: dict[str, set[str]] = {}

    def add(name: str, version: str) -> None:
        versions.setdefault(canonicalize_name(name), set()).add(version)

    for lock in ("jobs.txt", "airflow.txt"):
        for line in (REPO / "constraints" / lock).read_text().splitlines():
            name, sep, version = line.split("#")[0].strip().partition("==")
            if sep:
                add(name.split("[")[0], version)
    add("horovod", re.search(r"^HOROVOD_VERSION=(\S+)", SETUP_ENV, re.MULTILINE)[1])
    for jar in re.search(r"^S3A_JARS=\((.*?)\)", SETUP_ENV, re.MULTILINE)[1].split():
        name, version = re.fullmatch(r"(.+)-(\d[\d.]*)\.jar", jar).groups()
        add(name, version)
    # Not locked: the venvs get the newest setuptools at or above this floor, so the floor is the version to check.
    for script in (SETUP_ENV, (REPO / "docker" / "jobs-env.sh").read_text()):
        add("setuptools", re.search(r'"setuptools>=([\d.]+)"', script)[1])
    return versions


def test_locked_versions_parse_the_project_pins():
    versions = locked_versions()
    assert versions["pyarrow"] == {"25.0.1", "26.0.1"}   # the jobs env (numpy 1) and the Airflow env
    assert versions["horovod"] == {"0.28.1"} and versions["setuptools"] == {"78.1.1"}
    assert versions["aws-java-sdk-bundle"] == {"1.11.901"} and versions["apache-airflow"]


def check(advisory: dict, locked: dict[str, set[str]]) -> None:
    versions = locked.get(canonicalize_name(advisory["package"]))
    assert versions, f"{advisory['id']}: {advisory['package']} is in no lock; drop the entry or fix its name"
    affected = SpecifierSet(advisory["affected"])
    inside = sorted(version for version in versions if Version(version) in affected)
    if advisory["status"] == "fixed":
        assert not inside, (f"{advisory['id']}: {advisory['package']} {inside} is inside {advisory['affected']} "
                            f"again ({advisory['note']})")
    else:
        assert advisory["status"] == "justified" and advisory["note"]
        assert inside, (f"{advisory['id']}: {advisory['package']} {sorted(versions)} is outside "
                        f"{advisory['affected']} now: mark the entry fixed")


@pytest.mark.parametrize("advisory", ADVISORIES, ids=[entry["id"] for entry in ADVISORIES])
def test_each_advisory_matches_its_status_in_the_locks(advisory):
    check(advisory, locked_versions())


def test_security_doc_table_is_the_advisory_list():
    section = (REPO / "docs" / "security.md").read_text()
    rows = re.findall(r"^\| (\S+) \| `?([\w.-]+)`? \| `([^`]+)` \| (fixed|justified) \|", section, re.MULTILINE)
    assert sorted(rows) == sorted((entry["id"], entry["package"], entry["affected"], entry["status"])
                                  for entry in ADVISORIES)


def test_a_lock_that_brings_back_a_vulnerable_version_is_caught():
    """The check itself can fail: pyarrow 10.0.1 (the old lock) is inside CVE-2023-47248's range, and a justified
    entry whose package left the range is stale."""
    by_id = {entry["id"]: entry for entry in ADVISORIES}
    with pytest.raises(AssertionError, match="inside"):
        check(by_id["CVE-2023-47248"], {**locked_versions(), "pyarrow": {"10.0.1"}})
    with pytest.raises(AssertionError, match="mark the entry fixed"):
        check(by_id["CVE-2026-0994"], {**locked_versions(), "protobuf": {"5.29.6"}})
