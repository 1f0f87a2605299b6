"""No credential is committed: every tracked (or new, not ignored) file is scanned for credential-looking strings,
and no code dumps the process environment (it holds the S3 keys and Horovod's per-run _HOROVOD_SECRET_KEY)."""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SECRET_NAME = r"[A-Za-z0-9_]*(?:secret|password|passwd|token|fernet|private_key|api_key)[A-Za-z0-9_]*"
CREDENTIAL_PATTERNS = {
    "AWS access key id": re.compile(r"\b(?:AKIA|ASIA|AROA)[0-9A-Z]{16}\b"),
    "AWS secret access key": re.compile(r"(?i)secret[A-Za-z0-9_]*['\"]?\s*[:=]\s*['\"]?[A-Za-z0-9/+]{40}\b"),
    "private key block": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    # A secret-named field given a literal, token-like value (letters and digits, no template or variable).
    "literal secret value": re.compile(
        rf"(?i)\b{SECRET_NAME}['\"]?\s*[:=]\s*(['\"])(?=[^'\"]*\d)(?=[^'\"]*[A-Za-z])[^'\"\s${{}}%<>]{{12,}}\1"),
    "password in a URL": re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:[^/\s@'\"${}%<>*]{6,}@"),
}
# Dotenv-style files: any non-empty value of a secret-named variable is a committed secret.
ENV_FILE_SECRET = re.compile(rf"(?im)^[ \t]*(?:export[ \t]+)?({SECRET_NAME})[ \t]*=[ \t]*([^\s#]\S*)")
CODE_DIRS = ("rossmann_jobs", "plugins", "dags", "scripts", "bench")


def repo_files() -> list[Path]:
    listed = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, text=True)
    assert listed.returncode == 0, f"the scan needs a git checkout: {listed.stderr}"
    return [REPO_ROOT / name for name in sorted(set(listed.stdout.split("\0"))) if name
            and (REPO_ROOT / name).is_file()]


def text_of(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None  # binary (images)
    return data.decode("utf-8", errors="replace")


def credential_findings(text: str, is_env_file: bool) -> list[str]:
    findings = [f"{kind}: {match.group(0)[:12]}…" for kind, pattern in CREDENTIAL_PATTERNS.items()
                for match in pattern.finditer(text)]
    if is_env_file:
        findings += [f"secret variable {match.group(1)} has a value" for match in ENV_FILE_SECRET.finditer(text)]
    return findings


def is_env_file(path: Path) -> bool:
    return path.name == ".env" or path.name.startswith(".env.") or path.suffix == ".env"


def test_the_scanner_finds_planted_credentials():
    # Assembled at run time, so this file holds no credential-looking literal itself.
    key_id, secret = "AKIA" + "Q7" * 8, "wJal" + "rXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"
    planted = {
        "AWS access key id": f"aws_access_key_id = {key_id}",
        "AWS secret access key": f"aws_secret_access_key={secret}",
        "private key block": "-----BEGIN RSA " + "PRIVATE KEY-----",
        "literal secret value": 'db_password = "' + "hunter2" + "hunter2" + '"',
        "password in a URL": "postgresql://airflow:" + "s3cr3tpw" + "@db:5432/airflow",
    }
    for kind, text in planted.items():
        assert any(found.startswith(kind) for found in credential_findings(text, False)), kind
    assert credential_findings("POSTGRES_PASSWORD=" + "x9" * 8, True)
    # Placeholders, templates, variables and empty values are not credentials.
    for text in ('password = os.environ["PGPASSWORD"]', "token = '{{ var.value.token_2024 }}'",
                 "url = f'postgresql://airflow:{password}@127.0.0.1/db'", 'secret_key = "not-the-password"',
                 "AIRFLOW__API__SECRET_KEY: ${AIRFLOW_API_SECRET_KEY:?set it in .env}"):
        assert credential_findings(text, False) == [], text
    assert credential_findings("POSTGRES_PASSWORD=\nAIRFLOW_FERNET_KEY=\n", True) == []


def test_no_credential_is_committed():
    files = repo_files()
    assert any(path.name == "stack.py" for path in files) and len(files) > 50
    findings = {}
    for path in files:
        text = text_of(path)
        if text is not None and (found := credential_findings(text, is_env_file(path))):
            findings[str(path.relative_to(REPO_ROOT))] = found
    assert findings == {}, f"credential-looking strings in the repository: {findings}"


def environment_dumps(source: str) -> list[int]:
    """Lines that hand os.environ, or any value read from it, to a log, print, format or write call (conservative:
    a harmless setting read inline is flagged too; read it into a variable with a telling name first)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name not in {"print", "debug", "info", "warning", "error", "exception", "critical", "log", "format",
                        "dumps", "write"}:
            continue
        for arg in [*node.args, *(keyword.value for keyword in node.keywords)]:
            if any(isinstance(inner, ast.Attribute) and inner.attr == "environ" for inner in ast.walk(arg)):
                lines.append(node.lineno)
    return lines


def test_the_environment_dump_check_finds_one():
    assert environment_dumps("import os, logging\nlogging.info('env %s', os.environ)\n") == [2]
    assert environment_dumps("import os\nprint(dict(os.environ))\n") == [2]
    assert environment_dumps("import os\nlog.info('key %s', os.environ['AWS_SECRET_ACCESS_KEY'])\n") == [2]
    assert environment_dumps("import os\nhome = os.environ.get('HOME')\nprint(home)\n") == []


@pytest.mark.parametrize("directory", CODE_DIRS)
def test_no_code_logs_the_environment_or_horovods_key(directory):
    sources = [path for path in repo_files() if path.suffix == ".py"
               and path.relative_to(REPO_ROOT).parts[0] == directory]
    if directory in ("rossmann_jobs", "plugins", "dags"):
        assert sources, f"no Python files found under {directory}/"
    offenders = {}
    for path in sources:
        text = path.read_text()
        lines = environment_dumps(text)
        if "HOROVOD_SECRET_KEY" in text:
            lines.append(text[: text.index("HOROVOD_SECRET_KEY")].count("\n") + 1)
        if lines:
            offenders[str(path.relative_to(REPO_ROOT))] = lines
    assert offenders == {}, f"code that logs the environment or touches Horovod's secret key: {offenders}"
