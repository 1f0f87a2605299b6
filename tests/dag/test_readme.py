"""The README stays short and true: its diagram is the parsed DAG; every path, make target and link it names exists."""
from __future__ import annotations

import re

import dag_diagram  # noqa: E402  (scripts/dag_diagram.py: pyproject.toml's pytest pythonpath)
import pytest

from stack_helpers import DAG_ID, REPO_ROOT

README = REPO_ROOT / "README.md"
MAX_LINES = 120
# Paths into the repository as the README writes them (in code spans or prose); var/, s3:// and ~ are made at run time.
REPO_PATH = re.compile(r"(?<![\w/.~-])((?:\.ci|bench|constraints|dags|docker|docs|plugins|rossmann_jobs|scripts|tests)"
                       r"/[\w./-]*\w)")
SCRIPT_FLAGS = re.compile(r"((?:scripts|bench)/[\w/.-]+\.(?:sh|py))((?: --?[a-z][\w-]*(?: [\w.]+)?)+)")
MAKE_TARGET = re.compile(r"`make ([\w-]+)")
LINK = re.compile(r"\]\((?!https?://|mailto:)([^)#\s]+)(?:#([\w-]+))?\)")


@pytest.fixture(scope="module")
def dag():
    return dag_diagram.load_dag()


def missing_paths(text: str) -> list[str]:
    return sorted({path for path in REPO_PATH.findall(text) if not (REPO_ROOT / path).exists()})


def missing_flags(text: str) -> list[str]:
    """`scripts/x.sh --flag` where the script's text never mentions --flag."""
    missing = []
    for script, flags in SCRIPT_FLAGS.findall(text):
        source = (REPO_ROOT / script).read_text() if (REPO_ROOT / script).exists() else ""
        missing += [f"{script} {flag}" for flag in re.findall(r"--?[a-z][\w-]*", flags) if flag not in source]
    return missing


def missing_make_targets(text: str) -> list[str]:
    targets = set(re.findall(r"^([\w-]+):", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE))
    return sorted(set(MAKE_TARGET.findall(text)) - targets)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(text: str, base=REPO_ROOT) -> list[str]:
    broken = []
    for target, anchor in LINK.findall(text):
        path = base / target
        if not path.exists():
            broken.append(target)
        elif anchor and anchor not in {slug(h) for h in re.findall(r"^#+ (.*)$", path.read_text(), re.MULTILINE)}:
            broken.append(f"{target}#{anchor}")
    return broken


def test_readme_fits_on_two_screens():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/ (limit {MAX_LINES})"


def test_readme_diagram_has_exactly_the_dags_tasks_and_edges(dag):
    nodes, edges = dag_diagram.parse(dag_diagram.readme_diagram(README.read_text()))
    order, dag_edges = dag_diagram.graph(dag)
    assert dag.dag_id == DAG_ID
    assert nodes == set(order), f"README lacks {set(order) - nodes}, has extra {nodes - set(order)}"
    assert edges == dag_edges, f"README lacks {dag_edges - edges}, has extra {edges - dag_edges}"


def test_readme_diagram_is_the_generated_one(dag):
    assert dag_diagram.readme_diagram(README.read_text()) == dag_diagram.mermaid(dag), \
        "regenerate it: .venvs/airflow/bin/python scripts/dag_diagram.py --write README.md"


def test_the_diagram_parser_reads_back_what_the_generator_writes(dag):
    """Every edge, the dotted ones (implied by a longer path) included, survives mermaid() -> parse()."""
    order, edges = dag_diagram.graph(dag)
    assert dag_diagram.parse(dag_diagram.mermaid(dag)) == (set(order), edges)
    assert ("plan_run", "publish_scores") in dag_diagram.implied(edges)   # plan_run's XCom feeds every task
    assert ("wait_for_raw_drop", "prepare_features") not in dag_diagram.implied(edges)


def test_everything_the_readme_names_exists():
    text = README.read_text()
    assert missing_paths(text) == []
    assert missing_flags(text) == []
    assert missing_make_targets(text) == []
    assert broken_links(text) == []
    # The checks above see what matters: the README names both commands, the diagram script and the report's image.
    for path in ("scripts/demo.sh", "scripts/test.sh", "scripts/dag_diagram.py", "docs/figures/forecast_report.png"):
        assert path in REPO_PATH.findall(text) or f"({path})" in text, path


def test_the_checks_catch_what_is_wrong():
    """Negative control: a diagram with an edge too many, and a README naming things that do not exist."""
    nodes, edges = dag_diagram.parse('flowchart LR\n    a["a"]\n    b["b"]\n    a --> b -.-> c & a\n')
    assert nodes == {"a", "b"} and edges == {("a", "b"), ("b", "c"), ("b", "a")}
    bad = ("Run `bash scripts/no_such.sh`, `make nope`, `bash scripts/demo.sh --no-such-flag`, see "
           "[x](docs/missing.md) and [y](docs/airflow.md#no-such-heading).")
    assert missing_paths(bad) == ["docs/missing.md", "scripts/no_such.sh"]
    assert missing_flags(bad) == ["scripts/demo.sh --no-such-flag"]
    assert missing_make_targets(bad) == ["nope"]
    assert broken_links(bad) == ["docs/missing.md", "docs/airflow.md#no-such-heading"]
    with pytest.raises(ValueError, match="no generated DAG diagram"):
        dag_diagram.readme_diagram("```mermaid\nflowchart LR\n```")
