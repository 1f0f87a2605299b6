"""Benchmark: building the compose stack's images on this machine, and what they weigh.

Scenarios, each through scripts/compose/compose_e2e.py's own build (base images, then `docker-compose build` of each
project image), in this order:
  cold     nothing cached (the project's images, the local bases and the build cache removed), with the horovod
           wheel scripts/setup_env.sh cached staged in docker/wheels/: what a fresh CI machine pays;
  warm     the same again with everything cached: what a second run on the same machine pays;
  compile  nothing cached and no wheel staged, so horovod compiles inside the image build: the baseline for a
           machine without setup_env.sh's wheel (and what `docker compose up --build` costs a user).
Per scenario and image: build seconds and size. Writes bench/out/compose_build.json and
bench/figures/compose_build.png, and prints a table. Tears down nothing and starts no stack, but removes the
images of the e2e project (tag e2e) and the local bases: do not run it while that stack is up.

    PYTHONPATH=.:scripts/stack:scripts/compose .venvs/jobs/bin/python bench/bench_compose.py \
        [--scenarios cold,warm,compile]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import compose_e2e  # scripts/compose/compose_e2e.py, on PYTHONPATH
import images  # scripts/compose/images.py, on PYTHONPATH

REPO = Path(__file__).resolve().parents[1]

OUT = REPO / "bench" / "out" / "compose_build.json"
FIGURE = REPO / "bench" / "figures" / "compose_build.png"
PROJECT_IMAGES = ("rossmann-airflow", "rossmann-spark", "rossmann-local-s3", "rossmann-local/python",
                  "rossmann-local/postgres")


def forget_everything() -> list[str]:
    """Removes every image of PROJECT_IMAGES (any tag) and the classic builder's cache (dangling layers)."""
    listed = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                            text=True, check=True).stdout.split()
    doomed = [image for image in listed if image.split(":")[0] in PROJECT_IMAGES]
    if doomed:
        subprocess.run(["docker", "rmi", "-f", *doomed], capture_output=True, check=True)
    subprocess.run(["docker", "image", "prune", "-f"], capture_output=True, check=True)
    subprocess.run(["docker", "builder", "prune", "-af"], capture_output=True)
    return doomed


def scenario(name: str) -> dict:
    if name in ("cold", "compile"):
        removed = forget_everything()
        images.say(f"{name}: removed {len(removed)} images and the build cache")
    evidence: dict = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rossmann-bench-compose-") as workdir:
        compose_e2e.build_stack(Path(workdir), evidence, stage_wheel=name != "compile")
    total = time.monotonic() - started
    steps = [{"image": base["image"], "seconds": base["seconds"], "size_bytes": images.image_size(base["image"]),
              "kind": "base"} for base in evidence["base_images"]]
    steps += [{"image": image["image"], "seconds": image["seconds"], "size_bytes": image["size_bytes"],
               "kind": "project"} for image in evidence["images"]]
    return {"scenario": name, "total_s": round(total, 1), "horovod_wheel": evidence["horovod_wheel"],
            "steps": steps}


def draw(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [result["scenario"] for result in results]
    labels = sorted({step["image"].split(":")[0] for result in results for step in result["steps"]})
    fig, ax = plt.subplots(figsize=(8, 3.6))
    left = [0.0] * len(results)
    for label in labels:
        seconds = [sum(step["seconds"] for step in result["steps"] if step["image"].split(":")[0] == label) / 60
                   for result in results]
        ax.barh(names, seconds, left=left, label=label)
        left = [a + b for a, b in zip(left, seconds)]
    for index, result in enumerate(results):
        total = result["total_s"]
        ax.text(left[index] + 0.1, index, f"{total / 60:.1f} min" if total >= 60 else f"{total:.0f} s", va="center")
    ax.set_xlabel("minutes (2 cores)")
    ax.set_title("Building the compose stack's images")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_xlim(0, max(left) * 1.25 + 0.5)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="cold,warm,compile")
    args = parser.parse_args()
    images.ensure_engine(Path(tempfile.gettempdir()) / "rossmann-dockerd.log")
    results = [scenario(name) for name in args.scenarios.split(",")]
    docker = subprocess.run(["docker", "version", "-f", "{{.Server.Version}}"], capture_output=True,
                            text=True).stdout.strip()
    report = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "docker": docker},
              "results": results}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=1))
    draw(results)
    print(f"\n{'scenario':<9} {'image':<52} {'seconds':>8} {'size MiB':>9}")
    for result in results:
        for step in result["steps"]:
            print(f"{result['scenario']:<9} {step['image']:<52} {step['seconds']:>8.1f} "
                  f"{step['size_bytes'] / 2**20:>9.0f}")
        print(f"{result['scenario']:<9} {'total':<52} {result['total_s']:>8.1f}")
    print(f"\nwrote {OUT} and {FIGURE}")


if __name__ == "__main__":
    main()
