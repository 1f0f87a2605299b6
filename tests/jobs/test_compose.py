"""The docker-compose production stack: a valid Compose file whose settings and connections fit the DAG.

tests/dag/test_compose_e2e.py builds the images and runs the stack for real (images build, containers become
healthy, the DAG runs). What only a static look can check is here:
* the file against the Compose specification (docker/compose-spec.json, a copy of schema/compose-spec.json from
  github.com/compose-spec/compose-spec at 170098ba07d9f53c383a41bfd4c5166b0a4529a6), and with Debian's
  `docker-compose config` (interpolation, merges, required settings);
* the build context excludes local environments and secrets, and mounted files exist;
* the connections, URLs and hosts the Airflow components use name services of the stack, with matching ports,
  credentials and paths; the images install the same pins as the tested jobs environment;
* secrets come only from .env, whose generator (docker/gen_env.py) fills every secret.
"""
from __future__ import annotations

import ast
import base64
import copy
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from fnmatch import fnmatch
from importlib import metadata
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

import images  # scripts/compose/images.py: the compose run's image builds read the same pins
from images import shell_assignment

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yaml"
ENV_EXAMPLE = REPO / ".env.example"
GEN_ENV = REPO / "docker" / "gen_env.py"
SCHEMA = REPO / "docker" / "compose-spec.json"
JOBS_ENV_SCRIPT = REPO / "docker" / "jobs-env.sh"

SECRET_NAME = re.compile(r"PASSWORD|SECRET|FERNET|JWT|TOKEN")
VARIABLE = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_]\w*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
                      r"|(?P<named>[A-Za-z_]\w*))")
ENV_LINE = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")
SAFE_SECRET = re.compile(r"^[A-Za-z0-9_=-]+$")
# Variables Compose itself reads from .env rather than the file.
COMPOSE_OWN_VARIABLES = {"COMPOSE_PROJECT_NAME"}


# --- helpers ----------------------------------------------------------------------------------------------------

def variables_in(node) -> dict[str, set[str]]:
    """Variable name -> the operators it is used with ('' for a plain reference) anywhere in a YAML tree."""
    found: dict[str, set[str]] = {}
    if isinstance(node, str):
        for match in VARIABLE.finditer(node):
            if not match["escaped"]:
                found.setdefault(match["braced"] or match["named"], set()).add(match["op"] or "")
    elif isinstance(node, (list, dict)):
        for item in node.values() if isinstance(node, dict) else node:
            for name, ops in variables_in(item).items():
                found.setdefault(name, set()).update(ops)
    return found


def parse_env_file(text: str) -> dict[str, str]:
    return {match["name"]: match["value"] for line in text.splitlines() if (match := ENV_LINE.match(line.strip()))}


def generated_env() -> dict[str, str]:
    result = subprocess.run([sys.executable, str(GEN_ENV)], capture_output=True, text=True, check=True)
    return parse_env_file(result.stdout)


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuation lines joined and comments dropped."""
    instructions, pending = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    return instructions


def dockerfile_stages(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Instructions per build stage name (the last, unnamed stage is 'final')."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current = None
    for keyword, rest in dockerfile_instructions(path):
        if keyword == "FROM":
            words = rest.split()
            current = words[2] if len(words) == 3 and words[1].upper() == "AS" else "final"
            stages[current] = []
        elif current is not None:
            stages[current].append((keyword, rest))
    return stages


def dockerfile_env(path: Path) -> dict[str, str]:
    env = {}
    for keyword, rest in dockerfile_instructions(path):
        if keyword == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(rest))
    return env


def ignore_patterns() -> list[str]:
    """The root .dockerignore: both images' context is the repository root, and the classic builder that
    docker-compose 1.x uses reads no per-Dockerfile ignore file."""
    return [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
            if line.strip() and not line.strip().startswith("#")]


def is_ignored(path: str, patterns: list[str]) -> bool:
    """Whether a context path (or a folder above it) matches a .dockerignore pattern (no '!' rules are used)."""
    parts = Path(path).parts
    prefixes = ["/".join(parts[:end]) for end in range(1, len(parts) + 1)]
    for pattern in patterns:
        anywhere = pattern.startswith("**/")
        core = pattern[3:] if anywhere else pattern
        for prefix in prefixes:
            segments = prefix.split("/")
            candidates = ["/".join(segments[start:]) for start in range(len(segments))] if anywhere else [prefix]
            if any(fnmatch(candidate, core) for candidate in candidates):
                return True
    return False


def memory_mib(size: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kmgt]?)b?", size.lower()).groups()
    return int(number) * {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 ** 2, "": 1 / 1024 ** 2}[unit]


# --- fixtures ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def raw_compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return generated_env()


@pytest.fixture(scope="module")
def services(docker_compose, stack_env, tmp_path_factory) -> dict[str, dict]:
    """The services as Compose itself resolves them with a generated .env (`docker-compose config`: anchors merged,
    env_file read, variables interpolated)."""
    env_file = tmp_path_factory.mktemp("compose") / "stack.env"
    env_file.write_text("".join(f"{key}={value}\n" for key, value in stack_env.items()))
    result = run_docker_compose(docker_compose, env_file, "--profile", "tools", "config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["services"]


def published_container_ports(spec: dict) -> set[int]:
    """Container ports a service publishes (`docker-compose config` writes them as [ip:]host:container/proto)."""
    return {int(mapping.split("/")[0].rsplit(":", 1)[-1]) for mapping in spec.get("ports", [])}


def airflow_services(services: dict[str, dict]) -> dict[str, dict]:
    return {name: spec for name, spec in services.items()
            if spec.get("build", {}).get("dockerfile") == "docker/airflow/Dockerfile"}


def service_dockerfile(spec: dict) -> Path:
    return REPO / spec["build"]["context"] / spec["build"]["dockerfile"]


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname, parts.port


# --- the file is valid Compose ----------------------------------------------------------------------------------

def test_compose_file_matches_the_compose_specification(raw_compose):
    import jsonschema

    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    errors = [f"{error.json_path}: {error.message}" for error in validator.iter_errors(raw_compose)]
    assert not errors, "docker-compose.yaml violates the Compose specification:\n" + "\n".join(errors)


def test_schema_check_rejects_misspelt_keys_and_conditions(raw_compose):
    """The vendored schema is strict enough to catch the typical slip (guards against a permissive schema copy)."""
    import jsonschema

    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    broken = copy.deepcopy(raw_compose)
    broken["services"]["postgres"]["helthcheck"] = broken["services"]["postgres"].pop("healthcheck")
    broken["services"]["airflow-init"]["depends_on"]["postgres"]["condition"] = "service_heathy"
    messages = " ".join(error.message for error in validator.iter_errors(broken))
    assert "helthcheck" in messages and "service_heathy" in messages


@pytest.fixture(scope="module")
def docker_compose() -> str:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("Debian's docker-compose is not installed (scripts/setup_system.sh installs it); "
                    "the Compose-spec schema check above still ran")
    return binary


def run_docker_compose(binary: str, env_file: Path, *args: str) -> subprocess.CompletedProcess:
    # Only PATH/HOME: variables of the calling shell would override the env file.
    clean_env = {key: os.environ[key] for key in ("PATH", "HOME") if key in os.environ}
    return subprocess.run([binary, "--env-file", str(env_file), "-f", str(COMPOSE_FILE), *args],
                          capture_output=True, text=True, env=clean_env, cwd=REPO, timeout=120)


def test_docker_compose_refuses_to_start_without_the_secrets(docker_compose, tmp_path):
    env_file = tmp_path / "empty.env"
    env_file.write_text(ENV_EXAMPLE.read_text())  # the template: secrets left empty
    result = run_docker_compose(docker_compose, env_file, "config", "-q")
    assert result.returncode != 0
    assert "in .env" in result.stderr, result.stderr


# --- settings and secrets ---------------------------------------------------------------------------------------

def test_env_example_documents_exactly_the_variables_the_file_reads(raw_compose):
    used = variables_in(raw_compose)
    documented = parse_env_file(ENV_EXAMPLE.read_text())
    assert set(used) - set(documented) == set(), "variables read by docker-compose.yaml but not in .env.example"
    assert set(documented) - set(used) - COMPOSE_OWN_VARIABLES == set(), ".env.example has unused variables"
    for name, operators in used.items():
        if SECRET_NAME.search(name):
            assert operators == {":?"}, f"secret {name} must be required (${{{name}:?...}}), never defaulted"
            assert documented[name] == "", f".env.example must leave secret {name} empty"


def test_gen_env_fills_every_secret_with_a_fresh_safe_value(stack_env):
    template = parse_env_file(ENV_EXAMPLE.read_text())
    second = generated_env()
    assert set(stack_env) == set(template)
    for name, template_value in template.items():
        if template_value:
            assert stack_env[name] == template_value, f"{name}: a set value must be kept as it is"
            continue
        value = stack_env[name]
        assert SAFE_SECRET.match(value) and len(value) >= 24, f"{name}: weak or unsafe generated value"
        assert value != second[name], f"{name}: two runs generated the same secret"
    assert len(base64.urlsafe_b64decode(stack_env["AIRFLOW_FERNET_KEY"])) == 32
    assert len(stack_env["MINIO_ROOT_PASSWORD"]) >= 8  # MinIO refuses shorter root passwords


def test_secret_settings_come_only_from_required_variables(raw_compose):
    required_variable = re.compile(r"\$\{\w+:\?[^}]*\}")
    for name, spec in raw_compose["services"].items():
        for key, value in (spec.get("environment") or {}).items():
            if SECRET_NAME.search(key):
                assert required_variable.fullmatch(value), f"{name}.{key}: not a required variable"
            if key.startswith("AIRFLOW_CONN_"):
                conn = json.loads(value)  # variables sit inside JSON strings, so the raw value parses
                for field in ("login", "password"):
                    if field in conn:
                        assert required_variable.fullmatch(conn[field]), f"{name}.{key}: literal {field}"
            if key == "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN":
                without_variables = required_variable.sub("", value)
                assert urlsplit(without_variables).password == "", f"{name}.{key}: literal password"


def test_no_credentials_in_the_stack_files():
    files = [COMPOSE_FILE, ENV_EXAMPLE, *sorted(path for path in (REPO / "docker").rglob("*")
                                                 if path.is_file() and path.name != "compose-spec.json"
                                                 and path.suffix != ".whl")]
    well_known = re.compile(r"AKIA[0-9A-Z]{16}|minioadmin|changeme|airflow:airflow@|BEGIN [A-Z ]*PRIVATE KEY",
                            re.IGNORECASE)
    for path in files:
        text = path.read_text()
        assert not well_known.search(text), f"{path}: {well_known.search(text)[0]!r}"
        if path.name == "Dockerfile":
            for keyword, rest in dockerfile_instructions(path):
                if keyword in ("ENV", "ARG"):
                    assert not SECRET_NAME.search(rest.upper()), f"{path}: secret-looking {keyword} {rest}"


# --- images and build inputs ------------------------------------------------------------------------------------

def test_build_context_excludes_local_state_and_secrets(services):
    dockerfiles = {service_dockerfile(spec) for spec in services.values() if "build" in spec}
    assert {path.relative_to(REPO).as_posix() for path in dockerfiles} == {"docker/airflow/Dockerfile",
                                                                           "docker/spark/Dockerfile"}
    for dockerfile in dockerfiles:
        assert dockerfile.is_file()
        patterns = ignore_patterns()
        for needed_out in (".env", ".venvs", ".git"):
            assert is_ignored(needed_out, patterns), f"{dockerfile}: build context must exclude {needed_out}"
    for name, spec in services.items():
        for volume in spec.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (REPO / source).is_file(), f"{name}: mounted file {source} does not exist"


def test_spark_image_installs_the_tested_jobs_environment(services):
    spark_dockerfile = REPO / "docker/spark/Dockerfile"
    airflow_dockerfile = REPO / "docker/airflow/Dockerfile"
    jobs_stage = dockerfile_stages(spark_dockerfile)["jobs-env"]
    # Identical stage text: the Airflow image's driver runs exactly the executors' environment (and builds once).
    assert jobs_stage == dockerfile_stages(airflow_dockerfile)["jobs-env"]
    assert ("RUN", "bash /build/jobs-env.sh /build /opt/jobs-venv") in jobs_stage
    copied = {source: rest.split()[-1] for keyword, rest in jobs_stage if keyword == "COPY"
              for source in rest.split()[:-1]}
    # requirements-jobs.txt includes requirements-executors.txt (-r, relative to its own folder).
    assert copied == {"requirements-jobs.txt": "/build/", "requirements-executors.txt": "/build/",
                      "constraints/jobs.txt": "/build/constraints/jobs.txt",
                      "docker/jobs-env.sh": "/build/jobs-env.sh",
                      "docker/wheels/": "/build/wheels/"}
    script = JOBS_ENV_SCRIPT.read_text()
    assert '-r "$SRC/requirements-jobs.txt" -c "$SRC/constraints/jobs.txt"' in script
    for flag in ("HOROVOD_WITH_TENSORFLOW=1", "HOROVOD_WITH_GLOO=1", "HOROVOD_WITHOUT_MPI=1",
                 "HOROVOD_WITHOUT_PYTORCH=1", "HOROVOD_WITHOUT_MXNET=1"):
        assert flag in script
    assert '"horovod[$HOROVOD_EXTRAS]==$HOROVOD_VERSION"' in script

    # The image's pins are the tested environment's: this test runs in it.
    setup_env = REPO / "scripts/setup_env.sh"
    horovod = shell_assignment(JOBS_ENV_SCRIPT, "HOROVOD_VERSION")
    assert horovod == shell_assignment(setup_env, "HOROVOD_VERSION") == metadata.version("horovod")
    assert shell_assignment(JOBS_ENV_SCRIPT, "HOROVOD_EXTRAS") == shell_assignment(setup_env, "HOROVOD_EXTRAS")
    pins = images.requirement_pins(REPO / "requirements-jobs.txt")
    assert "-r requirements-executors.txt" in (REPO / "requirements-jobs.txt").read_text().splitlines()
    for package in ("pyspark", "tensorflow-cpu", "numpy", "pyarrow"):
        assert pins[package] == metadata.version(package), f"{package}: the requirements files vs this env"
        for path in (spark_dockerfile, airflow_dockerfile, JOBS_ENV_SCRIPT):
            assert not re.search(rf"(?<![\w-]){package}==", path.read_text()), f"{path} pins {package} on its own"
    for name in ("S3A_JARS", "SAGEMAKER_PYSPARK"):
        assert shell_assignment(JOBS_ENV_SCRIPT, name) == shell_assignment(setup_env, name)
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    for jar in shell_assignment(JOBS_ENV_SCRIPT, "S3A_JARS").strip("()").split():
        assert (jars / jar).is_file(), f"the tested jobs env lacks {jar}"
    base = dockerfile_instructions(spark_dockerfile)[0]
    assert base == ("ARG", f"PYTHON_IMAGE=python:{sys.version_info.major}.{sys.version_info.minor}-slim-bookworm")
    assert f"python{sys.version_info.major}.{sys.version_info.minor} -m venv" in script


def test_images_install_the_wheels_not_a_copy_of_the_repository():
    """Both images build the two wheels as `make dist` does (scripts/build_wheels.sh, one shared stage) and install
    only them: no source folder is copied into a final image, and the Airflow image reads the DAGs from a bundle on
    the installed DAG files, not from a DAGS_FOLDER or PLUGINS_FOLDER."""
    sources = ("rossmann_jobs", "dags", "plugins", "pyproject.toml", "packaging")
    wheel_stages = []
    for name in ("spark", "airflow"):
        dockerfile = REPO / f"docker/{name}/Dockerfile"
        stages = dockerfile_stages(dockerfile)
        wheel_stages.append(stages["wheels"])
        assert ("RUN", "PIP=/opt/jobs-venv/bin/pip bash /src/scripts/build_wheels.sh /dist") in stages["wheels"]
        final = stages["final"]
        copied = [rest.split()[0] for keyword, rest in final if keyword == "COPY" and not rest.startswith("--from")]
        assert not [path for path in copied if path.rstrip("/") in sources], f"{dockerfile} copies sources: {copied}"
        assert ("COPY", "--from=wheels /dist/ /tmp/rossmann-dist/") in final
        installs = " ".join(rest for keyword, rest in final if keyword == "RUN")
        jobs_wheel = "/tmp/rossmann-dist/rossmann_jobs-*.whl"
        assert f"/opt/jobs-venv/bin/pip install --no-cache-dir --no-deps {jobs_wheel}" in installs
    assert wheel_stages[0] == wheel_stages[1], "the wheels stage differs between the images (no shared build cache)"
    env = dockerfile_env(REPO / "docker/airflow/Dockerfile")
    assert "AIRFLOW__CORE__DAGS_FOLDER" not in env and "AIRFLOW__CORE__PLUGINS_FOLDER" not in env
    bundle = json.loads(env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"])
    assert bundle[0]["kwargs"]["path"] == "/opt/airflow-venv/lib/python3.11/site-packages/rossmann/dags"


# --- wiring: what the DAG needs ---------------------------------------------------------------------------------

def dag_sources() -> str:
    return "\n".join(path.read_text() for folder in ("dags", "plugins") for path in (REPO / folder).rglob("*.py"))


def test_both_stacks_take_the_shared_airflow_settings_from_one_file(services, tmp_path):
    import stack as embedded  # scripts/stack/stack.py (pyproject.toml's pytest pythonpath)

    shared = embedded.shared_airflow_settings()
    assert shared["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] == "True" and len(shared) >= 5
    for name, spec in airflow_services(services).items():
        environment = {key: str(value) for key, value in spec["environment"].items()}
        assert {key: environment.get(key) for key in shared} == shared, name
    laptop = embedded.airflow_env(embedded.Stack(tmp_path), "http://127.0.0.1:1", api_port=8080)
    assert {key: laptop.get(key) for key in shared} == shared
    raw = COMPOSE_FILE.read_text()
    assert not [key for key in shared if f"{key}:" in raw], "a shared setting is also spelt in docker-compose.yaml"


def test_every_connection_the_dag_uses_is_set_for_the_task_runner(services):
    conn_ids = set(re.findall(r'\b(?:aws_)?conn_id\s*=\s*"(\w+)"', dag_sources()))
    assert {"spark_default", "aws_default"} <= conn_ids
    scheduler_env = services["airflow-scheduler"]["environment"]  # LocalExecutor: tasks run in the scheduler
    for conn_id in conn_ids:
        assert f"AIRFLOW_CONN_{conn_id.upper()}" in scheduler_env, f"connection {conn_id} is not configured"


def test_spark_connection_points_at_the_stack_master_with_the_jobs_python(services):
    conn = json.loads(services["airflow-scheduler"]["environment"]["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert conn["conn_type"] == "spark" and "port" not in conn  # host is the whole master URL
    master_url = conn["host"]
    host, port = host_port(master_url)
    master = services[host]
    command = master["command"]
    assert "org.apache.spark.deploy.master.Master" in command
    assert command[command.index("--port") + 1] == str(port) and command[command.index("--host") + 1] == host
    assert conn["extra"]["deploy-mode"] == "client"
    spark_conf = conn["extra"]["spark_conf"]
    python = spark_conf["spark.pyspark.python"]
    for dockerfile in ("docker/spark/Dockerfile", "docker/airflow/Dockerfile"):
        assert dockerfile_env(REPO / dockerfile)["PYSPARK_PYTHON"] == python
    workers = {name: spec for name, spec in services.items() if "org.apache.spark.deploy.worker.Worker" in
               (spec.get("command") or [])}
    assert len(workers) >= 2, "Horovod ranks on different executors need at least two workers"
    worker_cores = 0
    for name, spec in workers.items():
        assert spec["command"][-1] == master_url, f"{name} registers with another master"
        worker_cores += int(spec["command"][spec["command"].index("--cores") + 1])
        worker_memory = spec["command"][spec["command"].index("--memory") + 1]
        assert memory_mib(spark_conf["spark.executor.memory"]) <= memory_mib(worker_memory), \
            f"{name}: an executor of {spark_conf['spark.executor.memory']} never fits in {worker_memory}"
        assert spark_conf["spark.executor.cores"] == "1"
    # Horovod starts every rank at once: the DAG's default number of processes must fit the cluster's slots.
    assert int(spark_conf["spark.cores.max"]) == worker_cores
    assert dag_param_default("num_proc") <= worker_cores // int(spark_conf["spark.task.cpus"])


def dag_param_default(name: str):
    tree = ast.parse((REPO / "dags/rossmann_forecast.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == name and isinstance(value, ast.Call):
                    return ast.literal_eval(value.args[0])
    raise AssertionError(f"the DAG has no Param {name!r}")


def test_s3_settings_point_at_the_stack_minio_with_one_identity_per_component(services, stack_env):
    """Airflow's tasks, the jobs (spark-submit and the executors) and the lander each have their own MinIO user
    (docker/minio/minio-init.sh; their policies: tests/jobs/test_s3_policies.py), none the root account."""
    scheduler = services["airflow-scheduler"]["environment"]
    conn = json.loads(scheduler["AIRFLOW_CONN_AWS_DEFAULT"])
    endpoint = conn["extra"]["endpoint_url"]
    host, port = host_port(endpoint)
    assert host in services and services[host]["command"][0] == "server"
    assert port in published_container_ports(services[host])
    keys = {name: (stack_env[f"ROSSMANN_S3_{infix}ACCESS_KEY"], stack_env[f"ROSSMANN_S3_{infix}SECRET_KEY"])
            for name, infix in (("airflow", ""), ("jobs", "JOBS_"), ("lander", "LANDER_"))}
    assert len(set(keys.values())) == 3 and len({access for access, _ in keys.values()}) == 3
    assert (conn["login"], conn["password"]) == keys["airflow"]
    jobs_conn = json.loads(scheduler["AIRFLOW_CONN_AWS_JOBS"])
    assert scheduler["ROSSMANN_JOBS_AWS_CONN_ID"] == "aws_jobs"
    assert (jobs_conn["login"], jobs_conn["password"]) == keys["jobs"]
    assert jobs_conn["extra"]["endpoint_url"] == endpoint
    init_env = services["minio-init"]["environment"]
    for name, infix in (("airflow", ""), ("jobs", "JOBS_"), ("lander", "LANDER_")):
        assert (init_env[f"ROSSMANN_S3_{infix}ACCESS_KEY"], init_env[f"ROSSMANN_S3_{infix}SECRET_KEY"]) == keys[name]
        assert keys[name][0] != init_env["MINIO_ROOT_USER"], f"{name} must not use the root account"
    assert init_env["ROSSMANN_BUCKET"] == scheduler["ROSSMANN_BUCKET"]
    expected = {"spark-worker-1": "jobs", "spark-worker-2": "jobs", "rossmann-cli": "lander"}
    with_s3 = {name: spec["environment"] for name, spec in services.items()
               if "AWS_ENDPOINT_URL" in (spec.get("environment") or {})}   # executors and one-off job commands
    assert set(with_s3) == set(expected)
    for name, env in with_s3.items():
        assert env["AWS_ENDPOINT_URL"] == endpoint
        assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == keys[expected[name]], name
    init_mount = services["minio-init"]["volumes"][0].split(":")
    assert services["minio-init"]["entrypoint"][-1] == init_mount[1]


def test_airflow_components_share_one_database_and_api(services):
    components = airflow_services(services)
    commands = {spec["command"][0] for spec in components.values()}
    assert commands == {"init", "api-server", "scheduler", "dag-processor", "triggerer"}
    assert services["airflow-init"]["command"] == ["init"]
    shared = ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__FERNET_KEY",
              "AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "AIRFLOW_CONN_SPARK_DEFAULT", "AIRFLOW_CONN_AWS_DEFAULT")
    for key in shared:
        assert len({spec["environment"][key] for spec in components.values()}) == 1, f"{key} differs"
    sample = next(iter(components.values()))["environment"]

    database = urlsplit(sample["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert database.scheme == "postgresql+psycopg2"
    postgres_env = services[database.hostname]["environment"]
    assert (database.username, database.password, database.path.lstrip("/")) == (
        postgres_env["POSTGRES_USER"], postgres_env["POSTGRES_PASSWORD"], postgres_env["POSTGRES_DB"])

    api_host, api_port = host_port(sample["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert services[api_host]["command"] == ["api-server"]
    assert api_port in published_container_ports(services[api_host])
    assert sample["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert "AIRFLOW_ADMIN_PASSWORD" in services[api_host]["environment"]
    assert all("AIRFLOW_ADMIN_PASSWORD" not in spec["environment"] for name, spec in components.items()
               if name != api_host), "only the api-server needs the admin password"


# --- health and start order -------------------------------------------------------------------------------------

def test_long_running_services_have_health_checks_and_start_in_order(services):
    one_shots = {name for name, spec in services.items() if spec.get("restart") == "no"}
    assert one_shots == {"minio-init", "airflow-init", "rossmann-cli"}
    for name, spec in services.items():
        if name not in one_shots:
            test = spec.get("healthcheck", {}).get("test")
            assert test and test[0] in ("CMD", "CMD-SHELL") and not spec["healthcheck"].get("disable"), \
                f"{name} has no health check"
        for dependency, rule in (spec.get("depends_on") or {}).items():
            assert dependency in services, f"{name} depends on unknown service {dependency}"
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], f"{name} waits for {dependency}'s missing health"
            if rule["condition"] == "service_completed_successfully":
                assert dependency in one_shots
    for name in airflow_services(services):
        if name != "airflow-init":
            assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
    scheduler_deps = services["airflow-scheduler"]["depends_on"]
    assert scheduler_deps["minio-init"]["condition"] == "service_completed_successfully"
    assert scheduler_deps["spark-master"]["condition"] == "service_healthy"
    assert services["airflow-scheduler"]["environment"]["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "True"
    assert services["airflow-api-server"]["healthcheck"]["test"][-1].endswith("/api/v2/monitor/health")


# --- scripts ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("script, shell", [("docker/jobs-env.sh", "bash"), ("docker/airflow/entrypoint.sh", "bash"),
                                           ("docker/spark/entrypoint.sh", "bash"),
                                           ("docker/spark-auth-conf.sh", "bash"), ("docker/airflow/spark-submit", "sh"),
                                           ("docker/airflow/run-driver.sh", "sh"),
                                           ("docker/minio/minio-init.sh", "dash")])
def test_scripts_parse(script, shell):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    result = subprocess.run([shell, "-n", str(REPO / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_airflow_entrypoint_writes_a_private_password_file_then_runs_airflow(tmp_path):
    stub_bin = tmp_path / "bin"
    stub_bin.mkdir()
    calls = tmp_path / "airflow-args"
    (stub_bin / "airflow").write_text(f'#!/bin/sh\necho "$@" > {calls}\n')
    (stub_bin / "airflow").chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    python_dir = str(Path(shutil.which("python3")).parent)
    env = {"PATH": f"{stub_bin}:{python_dir}:/usr/bin:/bin", "AIRFLOW_HOME": str(home),
           "AIRFLOW_ADMIN_PASSWORD": "pw-from-env"}
    entrypoint = str(REPO / "docker/airflow/entrypoint.sh")
    subprocess.run(["bash", entrypoint, "api-server", "--port", "8080"], env=env, check=True)
    password_file = home / "simple_auth_manager_passwords.json.generated"
    assert json.loads(password_file.read_text()) == {"admin": "pw-from-env"}
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
    assert calls.read_text().split() == ["api-server", "--port", "8080"]

    password_file.unlink()
    subprocess.run(["bash", entrypoint, "scheduler"], env={**env, "AIRFLOW_ADMIN_PASSWORD": ""}, check=True)
    assert not password_file.exists() and calls.read_text().split() == ["scheduler"]

    # `init` (the airflow-init service): the database, then the Spark pool through the Airflow venv's python.
    pool_calls = tmp_path / "python-args"
    (stub_bin / "python").write_text(f'#!/bin/sh\necho "$PYTHONPATH $@" > {pool_calls}\n')
    (stub_bin / "python").chmod(0o755)
    subprocess.run(["bash", entrypoint, "init"], check=True,
                   env={**env, "AIRFLOW_ADMIN_PASSWORD": ""})
    assert calls.read_text().split() == ["db", "migrate"]
    assert pool_calls.read_text().split() == ["-m", "rossmann.pools"]   # the installed package, no PYTHONPATH


def test_horovod_talks_on_the_project_network_not_loopback(services):
    """The driver (the scheduler container) and the executors (the workers) are different hosts: Horovod must bind
    their shared network's interface, which the containers name eth0 (loopback would keep the ranks apart)."""
    from rossmann_jobs.training.network import LOOPBACK, NICS_ENV

    assert services["airflow-scheduler"]["environment"][NICS_ENV] == "eth0" != LOOPBACK


def tooling_in(pins: dict[str, str]) -> list[str]:
    return sorted(name for name in images.TEST_TOOLING_MODULES if name in pins)


def test_the_images_install_no_test_tooling():
    # What the Dockerfiles install (requirements-jobs.txt via jobs-env.sh, requirements.txt in the Airflow venv).
    for dockerfile in ("docker/spark/Dockerfile", "docker/airflow/Dockerfile"):
        text = (REPO / dockerfile).read_text()
        assert "-dev.txt" not in text, f"{dockerfile} copies a development requirements file"
    assert "requirements.txt" in (REPO / "docker/airflow/Dockerfile").read_text()
    for product in ("requirements-jobs.txt", "requirements.txt"):
        assert tooling_in(images.requirement_pins(REPO / product)) == [], product
    # The development files are the product's plus the tools, and the set-up installs those.
    for dev, product in (("requirements-jobs-dev.txt", "requirements-jobs.txt"), ("requirements-dev.txt",
                                                                                 "requirements.txt")):
        dev_pins = images.requirement_pins(REPO / dev)
        assert f"-r {product}" in (REPO / dev).read_text().splitlines()
        assert images.requirement_pins(REPO / product).items() <= dev_pins.items()
        assert tooling_in(dev_pins)
        assert f'"$ROOT/{dev}"' in (REPO / "scripts/setup_env.sh").read_text()


def test_the_tooling_check_sees_a_test_tool_in_a_product_file(tmp_path):
    (tmp_path / "product.txt").write_text("boto3\npytest==8.3.3\n")
    assert tooling_in(images.requirement_pins(tmp_path / "product.txt")) == ["pytest"]


# --- networks and Spark authentication --------------------------------------------------------------------------

# Who may talk to whom: the Spark network (the drivers in the scheduler, the master, the workers), the storage
# network (the bucket and the services that read or write it), the workflow network (Airflow's components, the
# database), the landing network (the bucket and the data supplier's tool only).
NETWORKS = {"airflow-api-server": {"workflow", "storage"}, "airflow-dag-processor": {"workflow"},
            "airflow-init": {"workflow"}, "airflow-scheduler": {"spark", "storage", "workflow"},
            "airflow-triggerer": {"workflow", "storage"}, "minio": {"storage", "landing"}, "minio-init": {"storage"},
            "postgres": {"workflow"}, "rossmann-cli": {"landing"}, "spark-master": {"spark"},
            "spark-worker-1": {"spark", "storage"}, "spark-worker-2": {"spark", "storage"}}
SPARK_SECRET = "SPARK_AUTH_SECRET"
SPARK_AUTH_SCRIPT = REPO / "docker" / "spark-auth-conf.sh"


def test_each_service_joins_only_the_networks_it_needs(services):
    assert {name: set(spec.get("networks") or {"default"}) for name, spec in services.items()} == NETWORKS
    # The data supplier's tool shares a network with the bucket only: never the Spark master (code on the workers),
    # Airflow's API or log server, or the database.
    (landing,) = services["rossmann-cli"]["networks"]
    assert {name for name, spec in services.items() if landing in spec["networks"]} == {"rossmann-cli", "minio"}


def test_the_spark_network_is_eth0_wherever_a_driver_or_a_rank_runs(services):
    """Horovod and the executors talk on eth0 (ROSSMANN_HOROVOD_NICS): Docker names the interfaces in the order a
    container joins its networks, and compose joins the highest priority first."""
    for name, spec in services.items():
        networks = spec["networks"]
        if "spark" in networks and len(networks) > 1:
            priority = {network: (settings or {}).get("priority", 0) for network, settings in networks.items()}
            assert priority["spark"] > max(value for network, value in priority.items() if network != "spark"), name
    spark_conf = json.loads(services["airflow-scheduler"]["environment"]["AIRFLOW_CONN_SPARK_DEFAULT"])["extra"][
        "spark_conf"]
    # Executors reach the driver by the scheduler's name, which the Spark network's DNS resolves to its address there.
    assert spark_conf["spark.driver.host"] == "airflow-scheduler"


def test_the_spark_secret_goes_only_to_the_spark_processes(services):
    holders = {name for name, spec in services.items() if SPARK_SECRET in (spec.get("environment") or {})}
    assert holders == {"spark-master", "spark-worker-1", "spark-worker-2", "airflow-scheduler"}
    for dockerfile, entrypoint in (("docker/spark/Dockerfile", "docker/spark/entrypoint.sh"),
                                   ("docker/airflow/Dockerfile", "docker/airflow/entrypoint.sh")):
        assert "spark-auth-conf.sh" in (REPO / dockerfile).read_text(), dockerfile
        assert "write_spark_auth_conf" in (REPO / entrypoint).read_text(), entrypoint
        assert dockerfile_env(REPO / dockerfile)["SPARK_CONF_DIR"], dockerfile


def run_spark_auth_conf(tmp_path: Path, secret: str | None, **settings: str) -> tuple[Path, dict[str, str]]:
    conf_dir = tmp_path / "spark-conf"
    env = {"PATH": os.environ["PATH"], "SPARK_CONF_DIR": str(conf_dir), **settings}
    if secret is not None:
        env[SPARK_SECRET] = secret
    done = subprocess.run(["bash", "-c", f'source "{SPARK_AUTH_SCRIPT}" && write_spark_auth_conf && env -0'],
                          env=env, capture_output=True, check=True)
    after = dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    return conf_dir / "spark-defaults.conf", after


def test_the_entrypoints_write_a_private_spark_conf_and_drop_the_secret(tmp_path):
    conf, after = run_spark_auth_conf(tmp_path, "planted-spark-auth")
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600 and stat.S_IMODE(conf.parent.stat().st_mode) == 0o700
    settings = dict(line.split(" ", 1) for line in conf.read_text().splitlines())
    assert settings == {"spark.authenticate": "true", "spark.authenticate.secret": "planted-spark-auth",
                        "spark.network.crypto.enabled": "true", "spark.ui.enabled": "false"}
    assert SPARK_SECRET not in after and "planted-spark-auth" not in "".join(after.values())


def test_without_the_secret_no_spark_conf_is_written(tmp_path):
    conf, after = run_spark_auth_conf(tmp_path, None)
    assert not conf.exists() and SPARK_SECRET not in after


def test_the_drivers_user_gets_the_spark_conf_through_its_group(tmp_path):
    import grp

    group = grp.getgrgid(os.getgid()).gr_name
    conf, _ = run_spark_auth_conf(tmp_path, "planted-spark-auth", SPARK_CONF_GROUP=group)
    assert stat.S_IMODE(conf.stat().st_mode) == 0o640 and stat.S_IMODE(conf.parent.stat().st_mode) == 0o750
    assert conf.stat().st_gid == conf.parent.stat().st_gid == os.getgid()


def test_the_scheduler_starts_spark_drivers_as_their_own_user_and_nothing_else():
    """docker/airflow/spark-submit, first on the image's PATH, hands the operator's allow-listed environment to
    run-driver.sh as sparkjob; sudoers lets airflow run that one script as that one user; run-driver.sh runs the
    jobs venv's spark-submit, killed with its parent (the task kills its spark-submit, sudo)."""
    dockerfile = REPO / "docker" / "airflow" / "Dockerfile"
    assert dockerfile_env(dockerfile)["PATH"].split(":")[0] == "/opt/rossmann/bin"
    copies = {rest for keyword, rest in dockerfile_instructions(dockerfile) if keyword == "COPY"}
    assert "docker/airflow/spark-submit /opt/rossmann/bin/spark-submit" in copies
    assert "docker/airflow/sudoers /etc/sudoers.d/rossmann-spark-driver" in copies
    rules = [line.split() for line in (REPO / "docker" / "airflow" / "sudoers").read_text().splitlines()
             if line.strip() and not line.startswith(("#", "Defaults"))]
    assert rules == [["airflow", "ALL=(sparkjob)", "NOPASSWD:SETENV:", "/opt/rossmann/airflow/run-driver.sh"]]
    wrapper = (REPO / "docker" / "airflow" / "spark-submit").read_text()
    assert "exec sudo -n -E -u sparkjob /opt/rossmann/airflow/run-driver.sh \"$@\"" in wrapper
    launcher = (REPO / "docker" / "airflow" / "run-driver.sh").read_text()
    assert "exec setpriv --pdeathsig KILL /opt/jobs-venv/bin/spark-submit \"$@\"" in launcher
