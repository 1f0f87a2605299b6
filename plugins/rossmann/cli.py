"""The `rossmann-forecast` command of the installed wheel: bootstrap a deployment, or say where the DAG files are."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from rossmann import bootstrap


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rossmann-forecast", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("bootstrap", help="pool, connections (AIRFLOW_CONN_*) and Variables (ROSSMANN_JOBS_ROOT, "
                        "ROSSMANN_PY_FILES) in the metadata database, idempotently; prints what it did")
    commands.add_parser("dags-folder", help="print the folder of the installed DAG files (a LocalDagBundle's path)")
    commands.add_parser("bundle-config", help="print [dag_processor] dag_bundle_config_list for that folder")
    args = parser.parse_args(argv)
    if args.command == "bootstrap":
        bootstrap.bootstrap()
    elif args.command == "dags-folder":
        print(bootstrap.dags_folder())
    else:
        print(json.dumps(bootstrap.bundle_config()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
