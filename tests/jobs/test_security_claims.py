"""docs/security.md: every test a claim names exists, and every row of "Who holds what" names one (or says why not)."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SECURITY = REPO / "docs" / "security.md"
TEST_PATH = re.compile(r"tests/(?:jobs|dag)/test_[a-z0-9_]+\.py")


def named_tests(text: str) -> set[str]:
    return set(TEST_PATH.findall(text))


def holders_rows(text: str) -> list[list[str]]:
    section = text.split("## Who holds what", 1)[1].split("\n## ", 1)[0]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    return [row for row in rows[2:] if row]   # below the header and its rule


def unproven_rows(rows: list[list[str]]) -> list[str]:
    """The rows whose last cell names no test and does not say 'not yet'."""
    return [row[0] for row in rows if not TEST_PATH.search(row[-1]) and "not yet" not in row[-1]]


def test_every_test_a_claim_names_exists():
    missing = sorted(path for path in named_tests(SECURITY.read_text()) if not (REPO / path).is_file())
    assert missing == []


def test_every_holder_names_the_test_that_shows_it():
    rows = holders_rows(SECURITY.read_text())
    assert len(rows) >= 6 and all(len(row) == 5 for row in rows)
    assert unproven_rows(rows) == []


def test_the_check_sees_a_row_without_a_test():
    assert unproven_rows([["a process", "a key", "read", "write", "trust us"]]) == ["a process"]
