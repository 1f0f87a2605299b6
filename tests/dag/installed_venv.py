"""The Airflow side as a user installs it: both wheels in a new venv whose sys.path holds no checkout folder.

The new venv gets its third-party packages (Airflow and the providers) by a path line in a .pth file naming the
Airflow env's site-packages: a path line adds only that folder to sys.path and runs none of the .pth files in it,
so the checkout's editable install (its import hook) and plugins/ stay out, and pip installs the wheels into the
new venv alone (--ignore-installed: nothing in the shared env is uninstalled). A fresh install of Airflow would
cost minutes of the suite.
"""
from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from stack_helpers import DAG_ID, JOBS_PYTHON


def last_json(output: str):
    """The CLI's JSON output (its last line; warnings come before it)."""
    return json.loads(output.strip().splitlines()[-1])


@dataclass
class InstalledVenv:
    venv: Path
    env: dict[str, str]   # a user's environment, not a test process's (which points Airflow at the checkout)
    work: Path
    wheels: Path

    @classmethod
    def install(cls, root: Path, wheels: Path) -> InstalledVenv:
        venv, work = root / "venv", root / "work"
        work.mkdir()
        subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        site_probe = "import sysconfig; print(sysconfig.get_path('purelib'))"
        site = Path(subprocess.run([venv / "bin" / "python", "-c", site_probe], check=True, capture_output=True,
                                   text=True).stdout.strip())
        (site / "airflow_base.pth").write_text(sysconfig.get_path("purelib") + "\n")
        subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        "--ignore-installed", *sorted(wheels.glob("*.whl"))], check=True)
        env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(root), "LANG": "C.UTF-8",
               "AIRFLOW_HOME": str(root / "airflow-home"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
               "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "no-plugins")}
        installed = cls(venv, env, work, wheels)
        installed.run([venv / "bin" / "python", "-m", "airflow", "db", "migrate"])   # as a deployment does first
        return installed

    @property
    def jobs_wheel(self) -> Path:
        """The jobs wheel, named so that executors import it too (rossmann_jobs.zip, Variable rossmann_py_files)."""
        return self.wheels / "rossmann_jobs.zip"

    def run(self, command: list, env: dict[str, str] | None = None) -> str:
        result = subprocess.run([str(part) for part in command], env=env or self.env, cwd=self.work,
                                capture_output=True, text=True)
        assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def bundle(self) -> list[dict]:
        """The DAG bundle config of the installed DAG files (`rossmann-forecast bundle-config`)."""
        return last_json(self.run([self.venv / "bin" / "rossmann-forecast", "bundle-config"]))

    def stack_env(self, stack_env: dict[str, str]) -> dict[str, str]:
        """An embedded stack's connections, pool, S3 and Airflow home, with this venv's Airflow, its DAG files from
        the bundle, no plugins folder, the jobs wheel for spark-submit's --py-files, and a Spark install named as an
        Airflow worker names it (the jobs env's pyspark)."""
        bundle = self.bundle()
        spark_home = subprocess.run([JOBS_PYTHON, "-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__))"],
                                    check=True, capture_output=True, text=True).stdout.strip()
        return {**stack_env, "PATH": f"{self.venv / 'bin'}:{stack_env['PATH']}", "HOME": self.env["HOME"],
                "AIRFLOW__CORE__PLUGINS_FOLDER": self.env["AIRFLOW__CORE__PLUGINS_FOLDER"],
                "AIRFLOW__CORE__DAGS_FOLDER": bundle[0]["kwargs"]["path"],
                "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundle),
                "AIRFLOW_VAR_ROSSMANN_PY_FILES": str(self.jobs_wheel), "SPARK_HOME": spark_home}

    def dags_test(self, logical_date: str, conf: dict, env: dict[str, str],
                  timeout_s: int = 1500) -> subprocess.CompletedProcess:
        """`airflow dags test` of this venv's Airflow, the DAG from the installed bundle."""
        return subprocess.run([self.venv / "bin" / "python", "-m", "airflow", "dags", "test", DAG_ID, logical_date,
                               "-B", "rossmann", "-c", json.dumps(conf)], env=env, cwd=self.work,
                              capture_output=True, text=True, timeout=timeout_s)
