"""Test tool for the negative control: commit a copy of a features output whose train files for one Horovod rank
(files[rank::size], as training.feature_set.rank_units assigns them) have their labels shuffled.

Run with the jobs environment's Python: python tests/dag/shuffle_rank_labels.py --features URI --out URI
A model trained on it averages one rank's gradients of noise into every step, as a run whose ranks trained on
different data would: the cluster-vs-local comparison must tell it from a correct run.
"""
from __future__ import annotations

import argparse
import io
import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rossmann_jobs import storage
from rossmann_jobs.features.spec import LABEL_COL
from rossmann_jobs.training.feature_set import load_feature_set


def shuffled(data: bytes, rng: np.random.Generator) -> tuple[bytes, int]:
    table = pq.read_table(io.BytesIO(data))
    index = table.schema.get_field_index(LABEL_COL)
    labels = table.column(index).to_numpy()
    table = table.set_column(index, table.schema.field(index), pa.array(rng.permutation(labels),
                                                                          table.schema.field(index).type))
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue(), table.num_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--size", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    features = load_feature_set(args.features)
    victims = set(features.train_files[args.rank::args.size])
    rng = np.random.default_rng(args.seed)
    attempt = storage.new_attempt_uri(args.out)
    rows = 0
    for uri in storage.list_files(features.attempt_uri):
        data = storage.read_bytes(uri)
        if uri in victims:
            data, count = shuffled(data, rng)
            rows += count
        storage.write_bytes(storage.join(attempt, uri[len(features.attempt_uri):].lstrip("/")), data)
    storage.commit(args.out, attempt, {"negative_control": f"labels of rank {args.rank}/{args.size} shuffled"})
    print(json.dumps({"attempt": attempt, "shuffled_files": sorted(victims), "shuffled_rows": rows,
                      "train_files": len(features.train_files)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
