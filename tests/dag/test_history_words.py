"""The product's files describe the product: no work-period names or issue numbers; every env variable documented.

Two scanners, each with a negative control on planted text:
- history_hits: a numbered work session or round, an issue number, a work-period tag ("(s33)", "_s36.png") or a
  reference to "the last session" in the product's text files. Evidence belongs in bench/RESULTS.md (a dated row)
  or docs/decisions.md (a dated entry).
- undocumented_env_names: every ROSSMANN_* name in the code (rossmann_jobs/, plugins/, dags/, scripts/, docker/)
  is an environment variable, and docs/configuration.md's table names it.
"""
from __future__ import annotations

import re
from pathlib import Path

from stack_helpers import REPO_ROOT

SCANNED = ("README.md", "docs", "rossmann_jobs", "plugins", "dags", "scripts", "tests", "testkit", "bench")
TEXT_SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".ini", ".json"}
# Built, installed or recorded output, not text anyone writes: bench/results holds benchmark JSON as it was recorded
# (run folders, labels), bench/out is the benchmarks' scratch output.
SKIPPED_DIRS = {".venvs", "var", "dist", "build", ".git", "__pycache__", ".ruff_cache", ".pytest_cache",
                "node_modules", "out", "results"}
SELF = Path(__file__).resolve()   # it plants the phrases it looks for

HISTORY = re.compile("|".join((
    r"\bsessions?[ -]?\d+",                                      # session 25, sessions 21-22
    r"\b(?:this|last|previous|next|earlier|later) (?:work )?(?:session|round)\b(?! of)",   # "the last session"
    r"\bissues?[ -]?#?\d+",                                      # issue 36, issues 31 and 36, issue #36
    r"(?<![\w&/#{$])#\d{1,4}\b(?![;\w])",                       # #36 (not &#36;, ${x#1.}, an anchor or a colour)
    r"(?<![-\w])rounds? \d+\b",                                   # round 6 ("round to 2", "--rounds 5" pass)
    r"\((?:s|session )\d{1,2}\)",                                # (s30)
    r"(?:\b|(?<=_))s\d{2}\b",                                    # s33 as a tag, -s36 / _s36 file suffixes
)), re.IGNORECASE)

ENV_NAME = re.compile(r"(?<![A-Za-z0-9_])ROSSMANN_[A-Z0-9_]+\b(?!\{)")
ENV_CODE_DIRS = ("rossmann_jobs", "plugins", "dags", "scripts", "docker")
CONFIGURATION = REPO_ROOT / "docs" / "configuration.md"


def text_files(root: Path, names=SCANNED, suffixes=TEXT_SUFFIXES):
    for name in names:
        top = root / name
        candidates = [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []
        for path in candidates:
            parts = set(path.relative_to(root).parts[:-1])
            if path.is_file() and path.suffix in suffixes and not parts & SKIPPED_DIRS and path.resolve() != SELF:
                yield path


def history_hits(root: Path, names=SCANNED) -> list[str]:
    """`file:line: text` for each line that names a work period or an issue number."""
    hits = []
    for path in text_files(root, names):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if HISTORY.search(line):
                hits.append(f"{path.relative_to(root)}:{number}: {line.strip()[:160]}")
    return hits


def env_names_in_code(root: Path, dirs=ENV_CODE_DIRS) -> dict[str, str]:
    """Each ROSSMANN_* name in the code, with the first file:line that names it."""
    names: dict[str, str] = {}
    for path in text_files(root, dirs, suffixes={".py", ".sh", ".yaml", ".yml", ".env", ""}):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for name in ENV_NAME.findall(line):
                names.setdefault(name, f"{path.relative_to(root)}:{number}")
    return names


def documented_env_names(configuration: Path) -> set[str]:
    """The names in the first column of configuration.md's table."""
    rows = [line for line in configuration.read_text().splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def undocumented_env_names(root: Path, configuration: Path, dirs=ENV_CODE_DIRS) -> list[str]:
    documented = documented_env_names(configuration)
    return sorted(f"{name} ({where})" for name, where in env_names_in_code(root, dirs).items()
                  if name not in documented)


def test_no_work_period_or_issue_number_in_the_product():
    hits = history_hits(REPO_ROOT)
    assert hits == [], ("name the evidence instead (a dated bench/RESULTS.md row, a docs/decisions.md entry):\n"
                        + "\n".join(hits))


def test_the_history_scanner_finds_planted_phrases_and_passes_product_words(tmp_path):
    planted = ["see session 25", "sessions 21-22 measured it", "fixed in issue 36", "issue #36", "as in #36",
               "the cells (s33)", "round 6 of prepare", "figure_s36.png", "since the last session",
               "the previous round's change"]
    harmless = ["the Spark session", "a SparkSession", "one session for run(spark)", "issues a request",
                "round to 2 decimals", "round(x, 2)", "sessions of the UI", "one last round of SDK retries",
                "the session's Spark", "s3://bucket/key", "s3a://bucket", "${version#1.}", "&#36;",
                "docs/airflow.md#the-airflow-ui", "5 interleaved rounds of 15 steps", "seed19", "color #333333"]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "planted.md").write_text("\n".join(planted) + "\n")
    (tmp_path / "docs" / "harmless.py").write_text("\n".join(f"# {line}" for line in harmless) + "\n")
    (tmp_path / "docs" / "data.bin").write_text("session 25\n")    # not a text file the scanner reads
    hits = history_hits(tmp_path, names=("docs",))
    assert [hit.split(": ", 1)[1] for hit in hits] == planted
    assert all(hit.startswith("docs/planted.md:") for hit in hits)


def test_every_rossmann_env_variable_is_in_the_configuration_table():
    names = env_names_in_code(REPO_ROOT)
    assert {"ROSSMANN_LOG_LEVEL", "ROSSMANN_SPARK_LOG_LEVEL", "ROSSMANN_BUCKET"} <= set(names)   # the scan sees them
    missing = undocumented_env_names(REPO_ROOT, CONFIGURATION)
    assert missing == [], f"add these to docs/configuration.md's table: {missing}"


def test_the_env_check_reports_a_name_missing_from_the_table(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "reader.py").write_text(
        'import os\nLEVEL = os.environ.get("ROSSMANN_PLANTED_SETTING", "x")\nBUCKET = os.getenv("ROSSMANN_BUCKET")\n'
        'PREFIX = f"ROSSMANN_S3_{infix}KEY"\nCONN = "AIRFLOW_CONN_ROSSMANN_ALERTS"\n')
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "run.sh").write_text('DIR="${ROSSMANN_PLANTED_DIR:-/tmp}"\n')
    table = tmp_path / "configuration.md"
    table.write_text("| variable | what |\n|---|---|\n| `ROSSMANN_BUCKET` | the bucket |\n")
    assert undocumented_env_names(tmp_path, table, dirs=("plugins", "scripts")) == [
        "ROSSMANN_PLANTED_DIR (scripts/run.sh:1)", "ROSSMANN_PLANTED_SETTING (plugins/reader.py:2)"]
