"""The Docker engine, the base images and the stack's own images for the compose end-to-end run.

Official bases by default (docker-compose.yaml's `${ROSSMANN_PYTHON_IMAGE:-python:3.11-slim-bookworm}` and
`${ROSSMANN_POSTGRES_IMAGE:-postgres:15}`); where they can neither be found nor pulled, local stand-ins built from
Debian's packages (docker/local/). Built images stay in the engine, so a later run on the same machine reuses them.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yaml"
LOCAL = REPO / "docker" / "local"
WHEELS = REPO / "docker" / "wheels"
ENGINE_START_TIMEOUT_S = 90


def say(message: str) -> None:
    print(f"== compose-e2e: {message}", flush=True)


def run(command: list[str], timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, text=True, capture_output=True, timeout=timeout, **kwargs)


@contextmanager
def heartbeat(what: str) -> Iterator[None]:
    """Prints "still <what>: N s" every PROGRESS_EVERY s (20, as scripts/progress.sh) while the block runs, so a
    quiet pull or build (output captured, or a silent RUN step) reads as progress, not a hang."""
    every_s, started, stop = float(os.environ.get("PROGRESS_EVERY", "20")), time.monotonic(), threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            print(f"   still {what}: {time.monotonic() - started:.0f} s", flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def apt_install(packages: list[str]) -> None:
    if os.geteuid() != 0:
        raise SystemExit(f"compose-e2e: install the Debian packages {' '.join(packages)} (needs root)")
    say(f"installing {' '.join(packages)} from Debian")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"],
                    ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]):
        with heartbeat(" ".join(command[:2])):
            done = run(command, env=env)
        if done.returncode:
            raise SystemExit(f"compose-e2e: {' '.join(command)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def engine_running() -> bool:
    return shutil.which("docker") is not None and run(["docker", "info"], timeout=30).returncode == 0


def ensure_engine(log_path: Path) -> str:
    """A running Docker engine and docker-compose: installs Debian's docker.io and starts dockerd if needed."""
    missing = [package for package, tool in (("docker.io", "dockerd"), ("docker-compose", "docker-compose"))
               if shutil.which(tool) is None]
    if missing:
        apt_install(missing)
    if engine_running():
        return "already running"
    if os.geteuid() != 0:
        raise SystemExit("compose-e2e: no Docker engine answers `docker info`; start dockerd (it needs root)")
    say(f"starting dockerd (log: {log_path})")
    with log_path.open("ab") as log:
        subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    deadline = time.monotonic() + ENGINE_START_TIMEOUT_S
    while not engine_running():
        if time.monotonic() > deadline:
            raise SystemExit(f"compose-e2e: dockerd did not answer within {ENGINE_START_TIMEOUT_S} s; see {log_path}")
        time.sleep(1)
    return "started"


def image_present(image: str) -> bool:
    return run(["docker", "image", "inspect", image], timeout=60).returncode == 0


def image_size(image: str) -> int:
    return int(run(["docker", "image", "inspect", "-f", "{{.Size}}", image], timeout=60).stdout.strip())


def pulled(image: str) -> bool:
    with heartbeat(f"pulling {image}"):
        return run(["docker", "pull", "-q", image], timeout=600).returncode == 0


def compose_default(variable: str, compose_file: Path = COMPOSE_FILE) -> str:
    """The default image docker-compose.yaml names for an image variable (`${VARIABLE:-default}`)."""
    match = re.search(r"\$\{" + re.escape(variable) + r":-([^}]+)\}", compose_file.read_text())
    if not match:
        raise ValueError(f"{compose_file} has no ${{{variable}:-...}}")
    return match.group(1)


def recipe_digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(file for root in paths for file in ([root] if root.is_file() else root.rglob("*"))
                       if file.is_file()):
        digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


@dataclass
class BaseImage:
    variable: str      # the image variable docker-compose.yaml reads
    image: str         # what the stack was built and run with
    source: str        # given | present | pulled | built locally | local, cached
    seconds: float = 0.0


def local_python_base() -> tuple[str, str, float]:
    """debootstrap + docker import (docker/local/python/build.sh), tagged by the recipe so a change rebuilds it."""
    script = LOCAL / "python" / "build.sh"
    tag = f"rossmann-local/python:3.11-bookworm-{recipe_digest(script)}"
    if image_present(tag):
        return tag, "local, cached", 0.0
    say(f"building the local Python base {tag} with debootstrap (about a minute)")
    started = time.monotonic()
    with heartbeat(f"building {tag}"):
        done = run(["bash", str(script), tag], timeout=1800)
    if done.returncode:
        raise SystemExit(f"compose-e2e: {script} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return tag, "built locally", time.monotonic() - started


def local_postgres(python_base: str) -> tuple[str, str, float]:
    """Debian's postgresql-15 on the local Python base (docker/local/postgres)."""
    folder = LOCAL / "postgres"
    tag = f"rossmann-local/postgres:15-{recipe_digest(folder)}"
    if image_present(tag):
        return tag, "local, cached", 0.0
    say(f"building the local PostgreSQL image {tag}")
    started = time.monotonic()
    with heartbeat(f"building {tag}"):
        done = run(["docker", "build", "-q", "-t", tag, "--build-arg", f"BASE_IMAGE={python_base}", str(folder)],
                   timeout=1800, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    if done.returncode:
        raise SystemExit(f"compose-e2e: building {tag} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return tag, "built locally", time.monotonic() - started


def official_or(variable: str, local_builder) -> BaseImage:
    """The image variable's value: set by the caller, the official image (present or pulled), else a local build."""
    if os.environ.get(variable):
        return BaseImage(variable, os.environ[variable], "given")
    official = compose_default(variable)
    if image_present(official):
        return BaseImage(variable, official, "present")
    if pulled(official):
        return BaseImage(variable, official, "pulled")
    say(f"{official} cannot be pulled: using a local build instead")
    image, source, seconds = local_builder()
    return BaseImage(variable, image, source, round(seconds, 1))


def base_images() -> list[BaseImage]:
    python = official_or("ROSSMANN_PYTHON_IMAGE", local_python_base)
    postgres = official_or("ROSSMANN_POSTGRES_IMAGE", lambda: local_postgres(python.image))
    return [python, postgres]


def stage_horovod_wheel(cache: Path | None, tensorflow_version: str, horovod_version: str) -> str | None:
    """Copies the horovod wheel scripts/setup_env.sh cached (built against the same TensorFlow) into docker/wheels/,
    so the images install it instead of compiling horovod again; returns its name, or None (no cache given, or no
    wheel in it: docker/wheels/ is emptied and the images compile horovod)."""
    wheels = [] if cache is None else sorted((cache / "wheels" / f"tf-{tensorflow_version}").glob(
        f"horovod-{horovod_version}-cp311-cp311-linux_x86_64.whl"))
    for stale in WHEELS.glob("horovod-*.whl"):
        if not wheels or stale.name != wheels[0].name:
            stale.unlink()
    if not wheels:
        return None
    target = WHEELS / wheels[0].name
    if not target.exists() or target.read_bytes() != wheels[0].read_bytes():
        shutil.copyfile(wheels[0], target)
    return wheels[0].name


@dataclass
class BuiltImage:
    service: str
    image: str
    seconds: float
    size_bytes: int


def build_images(compose, services: dict[str, str]) -> list[BuiltImage]:
    """Builds each image once, through the service that defines it (service -> image); the other services of the
    same image reuse it. The classic builder's layer cache makes an unchanged rebuild take seconds."""
    built = []
    for service, image in services.items():
        say(f"building {image} (service {service})")
        started = time.monotonic()
        with heartbeat(f"building {image}"):   # a RUN step (pip, horovod's compile) may print nothing for minutes
            compose("build", service, timeout=3600, stream=True)
        built.append(BuiltImage(service, image, round(time.monotonic() - started, 1), image_size(image)))
        say(f"built {image} in {built[-1].seconds:.0f} s, {built[-1].size_bytes / 2**20:.0f} MiB")
    return built


def as_records(items) -> list[dict]:
    return [asdict(item) for item in items]


def requirement_pins(path: Path) -> dict[str, str]:
    """{name (lower case): version} of a requirements file's `name==version` lines, and of the files it includes
    with `-r` (requirements-jobs.txt includes requirements-executors.txt, which pins TensorFlow)."""
    pins = {}
    for line in path.read_text().splitlines():
        include = re.match(r"^\s*-r\s+(\S+)", line)
        if include:
            pins.update(requirement_pins(path.parent / include[1]))
        elif match := re.match(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s#;]+)", line):
            pins[match[1].lower()] = match[2]
    return pins


def shell_assignment(path: Path, name: str) -> str:
    """The value a shell script assigns to `name` at the start of a line (a bare word, or an array's parentheses):
    the versions that scripts/setup_env.sh and docker/jobs-env.sh install."""
    match = re.search(rf"^{name}=(\(.*?\)|\S+)", path.read_text(), re.MULTILINE)
    if not match:
        raise ValueError(f"{path} does not assign {name}")
    return match[1]


# The test tooling no image may hold (requirements-dev.txt and requirements-jobs-dev.txt only), and a module each
# image's venv must hold, so that a probe that finds nothing at all cannot pass for a clean image.
TEST_TOOLING_MODULES = ("moto", "pytest", "ruff", "selenium")
IMAGE_VENVS = {"rossmann-airflow": {"/opt/airflow-venv": "airflow", "/opt/jobs-venv": "pyspark"},
               "rossmann-spark": {"/opt/jobs-venv": "pyspark"}}


def importable_modules(image: str, python: str, modules: list[str]) -> dict[str, bool]:
    """Which of modules the image's python finds (importlib.util.find_spec, nothing imported)."""
    probe = ("import importlib.util, json, sys; "
             "print(json.dumps({m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}))")
    done = run(["docker", "run", "--rm", "--network", "none", "--entrypoint", python, image, "-c", probe, *modules],
               timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"probing {image}'s {python}: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def image_tooling(built: list[BuiltImage]) -> dict[str, dict[str, bool]]:
    """'image venv' -> {module: importable} for the test tools and the venv's own marker module."""
    found = {}
    for image in built:
        for venv, marker in IMAGE_VENVS.get(image.image.split(":")[0], {}).items():
            found[f"{image.image} {venv}"] = importable_modules(image.image, f"{venv}/bin/python",
                                                               [*TEST_TOOLING_MODULES, marker])
    return found
