"""Command line: `generate` writes the 7 files (+ truth beside them); `land` writes dated drops, each closed by its
_SUCCESS manifest; `score` scores a forecast against the generator's truth."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from typing import Sequence

from rossmann_jobs import storage
from rossmann_jobs.features.drop_manifest import DROP_MARKER, manifest_bytes
from rossmann_jobs.job_protocol import configure_logging
from rossmann_jobs.job_runner import timed
from rossmann_jobs.synth.dataset import (
    DEFAULT_SEED,
    DEFAULT_SIGMA,
    DEFAULT_STORES,
    KNOB_RANGES,
    RAW_FILES,
    SynthConfig,
    SynthDataset,
    build_dataset,
)
from rossmann_jobs.synth.drops import DailyDrops, check_drop_date
from rossmann_jobs.synth.scenarios import SCENARIO_NAMES, scenario_overrides

log = logging.getLogger("rossmann.synth")

TRUTH_SUFFIX = ".truth.json"
EXPECTED_SUFFIX = ".expected.parquet"


def default_truth_uri(out_uri: str) -> str:
    """The truth sits beside the raw folder, never inside it: <out>.truth.json."""
    return out_uri.rstrip("/") + TRUTH_SUFFIX


def expected_values_uri(truth_uri: str) -> str:
    base = truth_uri[: -len(".json")] if truth_uri.endswith(".json") else truth_uri
    return base + EXPECTED_SUFFIX


def _check_truth_outside(out_uri: str, truth_uri: str) -> None:
    if truth_uri.startswith(out_uri.rstrip("/") + "/"):
        raise ValueError(f"--truth-out {truth_uri} lies inside the raw-data folder {out_uri}; the truth must be "
                         "kept out of what the pipeline reads. Choose a sibling path (default: <out>.truth.json).")


def write_truth(dataset: SynthDataset, truth_uri: str) -> None:
    side_uri = expected_values_uri(truth_uri)
    storage.write_bytes(side_uri, dataset.expected_parquet)
    storage.write_json(truth_uri, {**dataset.truth, "expected_values": side_uri.rsplit("/", 1)[-1]})
    floors = dataset.truth["noise_floor"]
    log.info("truth written to %s (+ %s): noise floor exp_rmspe train %.5f, validation %.5f, theoretical %.5f",
             truth_uri, side_uri, floors["train"]["exp_rmspe"], floors["validation"]["exp_rmspe"],
             floors["theoretical"])


def write_files(dataset: SynthDataset, folder_uri: str) -> None:
    write_named_files(dataset.files, folder_uri)


def write_named_files(files: dict[str, bytes], folder_uri: str) -> None:
    for name in RAW_FILES:
        storage.write_bytes(storage.join(folder_uri, name), files[name])


def generate(out_uri: str, config: SynthConfig, truth_uri: str | None = None) -> SynthDataset:
    truth_uri = truth_uri or default_truth_uri(out_uri)
    _check_truth_outside(out_uri, truth_uri)
    with timed("synth: build data set"):
        dataset = build_dataset(config)
    with timed(f"synth: write {len(RAW_FILES)} files to {out_uri}"):
        write_files(dataset, out_uri)
        write_truth(dataset, truth_uri)
    return dataset


def drop_dates(from_date: dt.date, to_date: dt.date) -> list[dt.date]:
    if from_date > to_date:
        raise ValueError(f"--from-date {from_date} is after --to-date {to_date}")
    return [from_date + dt.timedelta(days=i) for i in range((to_date - from_date).days + 1)]


def land(out_uri: str, from_date: dt.date, to_date: dt.date, config: SynthConfig,
         truth_uri: str | None = None, *, full_snapshot: bool = False) -> list[str]:
    """Write one drop per date, <out>/<YYYY-MM-DD>/<7 files> then <out>/<YYYY-MM-DD>/_SUCCESS.

    By default the drop for D holds what is known on D (drops.DailyDrops); D must lie in the generator's train
    period. full_snapshot=True puts the whole generated snapshot in every drop, for any date.
    Idempotent: a drop whose marker exists is left untouched (readers may already use it); a drop without its marker
    (an interrupted run) is rewritten. Returns the drop URIs landed by this call.
    """
    truth_uri = truth_uri or default_truth_uri(out_uri)
    _check_truth_outside(out_uri, truth_uri)
    dates = drop_dates(from_date, to_date)
    if not full_snapshot:
        for day in (from_date, to_date):   # refuse before anything is written
            check_drop_date(day)
    dataset: SynthDataset | None = None
    drops: DailyDrops | None = None
    landed = []
    for day in dates:
        drop = storage.join(out_uri, day.isoformat())
        if storage.exists(storage.join(drop, DROP_MARKER)):
            log.info("drop %s already landed (%s present): skipped", drop, DROP_MARKER)
            continue
        if dataset is None:   # generated at most once per call, and not at all when every drop is there
            with timed("synth: build data set"):
                dataset = build_dataset(config)
            write_truth(dataset, truth_uri)
            drops = DailyDrops(dataset)
        files = dataset.files if full_snapshot else drops.files_on(day)
        with timed(f"synth: write drop {drop}"):
            write_named_files(files, drop)
        # Last, and listing what was written, so prepare can tell a complete drop from a cut-short copy.
        marker = manifest_bytes({name: files[name] for name in RAW_FILES})
        storage.write_bytes(storage.join(drop, DROP_MARKER), marker)
        log.info("drop %s landed", drop)
        landed.append(drop)
    return landed


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a YYYY-MM-DD date: {text!r}") from None


def _model_settings(sub: argparse.ArgumentParser) -> None:
    """--sigma, the model knobs and --scenario. Defaults are None, so that a flag given overrides the scenario and
    one not given leaves the scenario's (or SynthConfig's) value."""
    sub.add_argument("--scenario", choices=SCENARIO_NAMES, default=None,
                     help="a named setting of the knobs (synth/scenarios.py); flags given override its values")
    sub.add_argument("--sigma", type=float, default=None,
                     help=f"standard deviation of the log-normal sales noise (sets the noise floor; "
                          f"default {DEFAULT_SIGMA})")
    for name, (_lowest, _highest, what) in KNOB_RANGES.items():
        sub.add_argument("--" + name.replace("_", "-"), dest=name, type=float, default=None,
                         help=f"{what} (default {SynthConfig.__dataclass_fields__[name].default})")


def config_from_args(args: argparse.Namespace) -> SynthConfig:
    """SynthConfig of --stores/--seed, the --scenario's values, then the individual flags given."""
    settings = scenario_overrides(args.scenario) if args.scenario else {}
    for name in ("sigma", *KNOB_RANGES):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    return SynthConfig(stores=args.stores, seed=args.seed, **settings)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rossmann_jobs.synth", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--out", required=True, help="local folder, file://, s3:// or s3a:// prefix")
        sub.add_argument("--stores", type=int, default=DEFAULT_STORES, help="number of stores (real data: 1115)")
        sub.add_argument("--seed", type=int, default=DEFAULT_SEED)
        _model_settings(sub)
        sub.add_argument("--truth-out", default=None, help="truth JSON URI (default: <out>.truth.json)")

    common(commands.add_parser("generate", help="write the 7 CSV files of rossmann.tgz"))
    land_parser = commands.add_parser("land", help="write one dated drop per day, each closed by _SUCCESS")
    common(land_parser)
    land_parser.add_argument("--from-date", type=_date, required=True)
    land_parser.add_argument("--to-date", type=_date, required=True)
    land_parser.add_argument("--full-snapshot", action="store_true",
                             help="put the whole generated snapshot (future sales included) in every drop, for any "
                                  "date; default: each drop holds only what is known on its date")
    score_parser = commands.add_parser("score", help="score a predict output for the drop of --as-of against the "
                                                     "generator's truth (JSON on stdout)")
    score_parser.add_argument("--stores", type=int, default=DEFAULT_STORES)
    score_parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    _model_settings(score_parser)   # the same settings rebuild the same truth
    score_parser.add_argument("--as-of", type=_date, required=True)
    score_parser.add_argument("--raw", required=True, help="the drop the forecast was made from (its test.csv)")
    score_parser.add_argument("--predictions", required=True, help="the predict job's output URI")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging()
    parser = _parser()
    args = parser.parse_args(argv)
    config = config_from_args(args)
    try:
        if args.command == "generate":
            generate(args.out, config, args.truth_out)
        elif args.command == "score":
            from rossmann_jobs.synth.truth_scores import score_predictions

            print(json.dumps(score_predictions(build_dataset(config), args.as_of, args.raw, args.predictions)))
        else:
            land(args.out, args.from_date, args.to_date, config, args.truth_out, full_snapshot=args.full_snapshot)
    except ValueError as error:
        parser.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
