"""Summary of one rossmann_forecast run from the Airflow metadata DB: task states, XComs, rendered fields, assets.

Run with the Airflow environment's Python and the stack's environment (AIRFLOW_HOME etc.):

    python scripts/stack/run_summary.py --logical-date 2015-07-31 [--json]

Without --run-id it takes the newest run of that logical date.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone

from rossmann_jobs.output_layout import NAIVE_FORECAST_MODEL


def load_run(dag_id: str, logical_date: str | None, run_id: str | None) -> dict:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.models.dagrun import DagRun
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = session.query(DagRun).filter(DagRun.dag_id == dag_id)
        if run_id:
            query = query.filter(DagRun.run_id == run_id)
        if logical_date:
            day = datetime.fromisoformat(logical_date).replace(tzinfo=timezone.utc)
            query = query.filter(DagRun.logical_date == day)
        run = query.order_by(DagRun.run_after.desc(), DagRun.id.desc()).first()
        if run is None:
            raise SystemExit(f"no run of {dag_id} for logical date {logical_date!r} / run id {run_id!r}")
        tasks = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id,
                                                   TaskInstance.run_id == run.run_id).all()
        xcoms = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run.run_id).all()
        rendered = session.query(RenderedTaskInstanceFields).filter(
            RenderedTaskInstanceFields.dag_id == dag_id, RenderedTaskInstanceFields.run_id == run.run_id).all()
        events = session.query(AssetEvent, AssetModel).join(AssetModel, AssetEvent.asset_id == AssetModel.id).filter(
            AssetEvent.source_dag_id == dag_id, AssetEvent.source_run_id == run.run_id).all()
        return {
            "dag_id": dag_id,
            "run_id": run.run_id,
            "state": str(run.state),
            "logical_date": run.logical_date.isoformat() if run.logical_date else None,
            "duration_s": (run.end_date - run.start_date).total_seconds() if run.end_date and run.start_date
            and run.end_date > run.start_date else None,
            "tasks": {ti.task_id: {"state": str(ti.state), "try_number": ti.try_number,
                                   "duration_s": ti.duration}
                      for ti in sorted(tasks, key=lambda ti: (ti.start_date is None, ti.start_date or 0))},
            "xcom": {row.task_id: XComModel.deserialize_value(row) for row in xcoms if row.key == "return_value"},
            # Operator extra links, which Airflow 3 stores as XComs named _link_<class> when the task ends.
            "links": {row.task_id: XComModel.deserialize_value(row) for row in xcoms if row.key.startswith("_link_")},
            "rendered_fields": {row.task_id: row.rendered_fields for row in rendered},
            "asset_events": [{"name": asset.name, "uri": asset.uri, "extra": event.extra,
                              "source_task_id": event.source_task_id} for event, asset in events],
        }


def render(summary: dict) -> str:
    xcom = summary["xcom"]
    metrics, gate, forecast = xcom.get("read_train_metrics", {}), xcom.get("quality_gate", {}), \
        xcom.get("publish_forecast", {})
    lines = [f"run {summary['run_id']} ({summary['logical_date']}): {summary['state']}"]
    lines += [f"  {task:20s} {info['state']:10s} try {info['try_number']}  "
              f"{(info['duration_s'] or 0):7.1f} s" for task, info in summary["tasks"].items()]
    if metrics:
        lines.append(f"validation exp_rmspe (new model): {metrics['best_val_exp_rmspe']:.4f}  best epoch "
                     f"{metrics.get('best_epoch')} of {metrics.get('epochs_run')}, {metrics.get('samples_per_s')} "
                     f"samples/s, {metrics.get('horovod_size')} Horovod processes")
    if gate:
        fallback = gate.get("forecast_model") == NAIVE_FORECAST_MODEL
        verdict = "PROMOTED to champion" if gate["promoted"] else (
            "NOT promoted" if fallback else "NOT promoted (champion kept)")
        lines.append(f"champion decision: {verdict}: {gate['reason']}")
        season = gate.get("season_backtest") or {}
        if season.get("reason"):
            lines.append(f"season backtest: {season['reason']}")
        lines.append("forecast model: the naive seasonal baseline (fallback: " + gate.get("fallback_reason", "") + ")"
                     if fallback else f"forecast model: {gate['champion_model_uri']}")
    if forecast:
        lines.append(f"submission.csv: {forecast['submission_uri']}")
        lines.append(f"report:         {forecast['report_uri']}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dag-id", default="rossmann_forecast")
    parser.add_argument("--logical-date")
    parser.add_argument("--run-id")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    summary = load_run(args.dag_id, args.logical_date, args.run_id)
    print(json.dumps(summary, indent=2, default=str) if args.json else render(summary))


if __name__ == "__main__":
    main(sys.argv[1:])
