"""The real Airflow components on loopback (api-server, scheduler, dag-processor, triggerer; LocalExecutor on
PostgreSQL): a run triggered through the REST API with params and an `airflow backfill create` run of an earlier date,
both active at once, succeed without interfering; a headless Chromium sees the DAG and its validated trigger form,
and takes the pictures of the DAG's grid and of a run's report (into docs/figures/ with ROSSMANN_UPDATE_FIGURES=1)."""
from __future__ import annotations

import json
import os
import re
import struct
import urllib.request
import zlib
from datetime import datetime
from pathlib import Path

import pytest

from airflow_rest import AirflowRest as Api
from airflow_rest import run_path as dag_run_path
from rossmann.pools import SPARK_POOL
from stack_helpers import DAG_ID, SCORING_TASKS, SMALL_RUN_CONF, embedded, start_stack

pytestmark = pytest.mark.slow

RUN_DATE = "2015-07-30"        # triggered through the REST API
BACKFILL_DATE = "2015-07-15"   # `airflow backfill create`, at the same time
# A short drop timeout, so that the deferred sensor's trigger checks every 10 s (poke_interval_for); the drop lands
# seconds after the sensor defers.
REST_RUN_CONF = {**SMALL_RUN_CONF, "raw_drop_timeout_s": 200}
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FIGURES = Path(__file__).resolve().parents[2] / "docs" / "figures"   # the README's and docs' pictures


@pytest.fixture(scope="module")
def ui_stack(tmp_path_factory, postgres_server):
    """Its own moto server and Airflow home with the metadata in its own PostgreSQL database, as production runs
    it: the scheduler, api-server, dag-processor and the backfill CLI write concurrently."""
    database = embedded.postgres_database(postgres_server, "airflow_ui")
    handle = start_stack(tmp_path_factory.mktemp("ui-stack"), sql_alchemy_conn=database)
    try:
        handle.url = embedded.start_ui(handle.state, handle.env)
        handle.password = embedded.stack_secrets(handle.state)["admin_password"]
        yield handle
    finally:
        embedded.stop_ui(handle.state)
        embedded.stop_process(handle.state, "moto")


@pytest.fixture(scope="module")
def api(ui_stack):
    client = Api(ui_stack.url, embedded.ADMIN_USER, ui_stack.password)
    client.wait_for(lambda: client.call("GET", f"/api/v2/dags/{DAG_ID}")[0] == 200, 300,
                    "the dag-processor to register the DAG")
    return client


def test_wrong_password_gets_no_token(ui_stack):
    with pytest.raises(AssertionError):
        Api(ui_stack.url, embedded.ADMIN_USER, "not-the-password")


def run_path(run: dict) -> str:
    return dag_run_path(DAG_ID, run)


def test_rest_trigger_validates_params_before_a_run_exists(ui_stack, api):
    status, body = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                            {"logical_date": f"{RUN_DATE}T00:00:00Z", "conf": {**SMALL_RUN_CONF, "epochs": 0}})
    assert status == 400 and "epochs" in body, "params must be validated at trigger time"
    assert api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns")[1]["total_entries"] == 0


@pytest.fixture(scope="module")
def concurrent_runs(ui_stack, api):
    """A REST-triggered run of RUN_DATE and a backfill run of BACKFILL_DATE, created together and both active at once
    (one pair instead of a REST run followed by a two-date backfill: a DAG run costs ~6 min on 2 cores)."""
    import subprocess

    ui_stack.land(BACKFILL_DATE, BACKFILL_DATE)
    assert api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})[0] == 200
    status, triggered = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                                 {"logical_date": f"{RUN_DATE}T00:00:00Z", "conf": REST_RUN_CONF})
    assert status == 200, triggered
    command = ["airflow", "backfill", "create", "--dag-id", DAG_ID, "--from-date", BACKFILL_DATE,
               "--to-date", BACKFILL_DATE, "--dag-run-conf", json.dumps(SMALL_RUN_CONF)]
    created = subprocess.run(command, env=ui_stack.process_env(), capture_output=True, text=True, timeout=300)
    assert created.returncode == 0, f"airflow backfill create failed:\n{created.stdout}\n{created.stderr}"
    # RUN_DATE's drop lands only once its sensor waits on the triggerer (deferred, holding no worker slot), and once
    # the scheduler has taken the exit of the worker process that deferred it. A trigger that fires before that
    # races Airflow's LocalExecutor: the deferring process's "success" reached the scheduler after the resumed try
    # was queued, and the scheduler failed that try as killed elsewhere (seen once; the drop had landed
    # 2 s after the state read "deferred", while that process took 6 s to exit). A real drop lands minutes later.
    sensor_path = f"{run_path(triggered)}/taskInstances/wait_for_raw_drop"
    api.wait_for(lambda: api.call("GET", sensor_path)[1].get("state") == "deferred", 600,
                 "the REST run's sensor to defer", interval_s=2)
    deferred_try = re.compile(rf"TaskInstance Finished: .*ti_id={api.call('GET', sensor_path)[1]['id']}, .*"
                              r"state=deferred, .*executor_state=success")
    scheduler_log = ui_stack.state.log_dir / "airflow-scheduler.log"
    api.wait_for(lambda: deferred_try.search(scheduler_log.read_text(errors="replace")), 120,
                 "the scheduler to take the exit of the process that deferred the sensor", interval_s=1)
    ui_stack.land(RUN_DATE, RUN_DATE)

    def finished():
        runs = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")[1]["dag_runs"]
        done = {run["logical_date"][:10]: run for run in runs if run["state"] in ("success", "failed")}
        return done if {RUN_DATE, BACKFILL_DATE} <= set(done) else None

    runs = api.wait_for(finished, 2400, "both runs to finish", interval_s=10)
    out = {}
    for day in (RUN_DATE, BACKFILL_DATE):
        path = run_path(runs[day])
        instances = api.call("GET", f"{path}/taskInstances")[1]["task_instances"]
        out[day] = {"run": runs[day], "path": path, "tasks": {ti["task_id"]: ti for ti in instances},
                    **{name: api.call("GET", f"{path}/taskInstances/{task}/xcomEntries/return_value")[1]["value"]
                       for name, task in (("plan", "plan_run"), ("gate", "quality_gate"),
                                          ("metrics", "read_train_metrics"))}}
    out["triggered"] = triggered
    return out


def test_rest_triggered_run_succeeds_with_its_params_and_no_secret_in_its_logs(ui_stack, api, concurrent_runs):
    rest, backfill = concurrent_runs[RUN_DATE], concurrent_runs[BACKFILL_DATE]
    assert rest["run"]["run_type"] == "manual" and rest["run"]["conf"] == REST_RUN_CONF
    assert concurrent_runs["triggered"]["dag_run_id"] == rest["run"]["dag_run_id"]
    states = {task: ti["state"] for task, ti in rest["tasks"].items()}
    assert rest["run"]["state"] == "success", states
    assert {state for task, state in states.items() if task not in SCORING_TASKS} == {"success"}
    # The only earlier forecast is the backfill's: scored iff it was published before this run looked for one.
    looked = datetime.fromisoformat(rest["tasks"]["find_forecasts_to_score"]["start_date"])
    published = datetime.fromisoformat(backfill["tasks"]["publish_forecast"]["end_date"])
    expected = "success" if published < looked else "skipped"
    assert {states[task] for task in SCORING_TASKS} == {expected}, (states, looked, published)

    assert rest["plan"]["as_of"] == RUN_DATE
    assert rest["gate"]["candidate_val_exp_rmspe"] == rest["metrics"]["gate_scores"]["challenger"]
    assert rest["metrics"]["horovod_size"] == SMALL_RUN_CONF["num_proc"]

    status, log = api.call("GET", f"{rest['path']}/taskInstances/train_model/logs/1?full_content=true")
    log_text = json.dumps(log)
    assert status == 200 and "Spark-Submit cmd" in log_text
    assert ui_stack.secret_key not in log_text
    # Every task log file the scheduler's workers wrote, not only the one the API serves.
    log_files = ui_stack.task_logs()
    assert "Spark-Submit cmd" in log_files and "epoch 1/" in log_files
    assert ui_stack.secret_key not in log_files and "_HOROVOD_SECRET_KEY" not in log_files


def test_the_deferred_sensor_resumed_when_the_drop_landed_and_the_report_link_opens(ui_stack, api, concurrent_runs):
    """The UI's "Forecast report" extra link of predict (served by the API from the link's XCom) opens the report,
    no credentials needed; the sensor that waited on the triggerer finished in its first try."""
    rest = concurrent_runs[RUN_DATE]
    assert rest["tasks"]["wait_for_raw_drop"]["try_number"] == 1 and rest["tasks"]["wait_for_raw_drop"]["state"] == \
        "success"
    # While it waited, its log said what for, as a first unpause's run for yesterday says it in the UI.
    status, log = api.call("GET", f"{rest['path']}/taskInstances/wait_for_raw_drop/logs/1?full_content=true")
    assert status == 200 and f"Waiting for s3://{ui_stack.bucket}/raw/{RUN_DATE}/_SUCCESS" in json.dumps(log), log
    status, body = api.call("GET", f"{rest['path']}/taskInstances/predict/links")
    assert status == 200, body
    links = body["extra_links"]
    assert set(links) == {"Forecast report"}, links
    with urllib.request.urlopen(links["Forecast report"], timeout=30) as response:
        page = response.read().decode()
    assert page.count('<img src="data:image/png;base64,') >= 5 and "Rossmann sales forecast" in page


def png_size_and_rows(path: Path) -> tuple[int, int, int]:
    """(width, height, distinct scanlines) of a PNG, read with zlib only: a blank or half-rendered page has few."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    chunks, offset = [], 8
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        if kind == b"IDAT":
            chunks.append(data[offset + 8:offset + 8 + length])
        offset += 12 + length
    pixels = zlib.decompress(b"".join(chunks))
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    stride = 1 + width * channels * depth // 8     # each scanline starts with its filter byte
    rows = {pixels[i + 1:i + stride] for i in range(0, len(pixels), stride)}
    return width, height, len(rows)


def save_figure(driver, name: str, tmp_path: Path) -> Path:
    """The page as a PNG: into docs/figures/ when ROSSMANN_UPDATE_FIGURES=1 (to commit), else the test's tmp dir."""
    folder = FIGURES if os.environ.get("ROSSMANN_UPDATE_FIGURES") == "1" else tmp_path
    path = folder / name
    assert driver.save_screenshot(str(path)), f"no screenshot for {path}"
    width, height, rows = png_size_and_rows(path)
    assert width >= 800 and height >= 600 and rows >= 100, (f"{path}: {width} x {height} px with {rows} distinct "
                                                            "rows: a blank or half-drawn page")
    return path


def test_headless_browser_sees_the_dag_its_trigger_form_grid_and_report(ui_stack, api, concurrent_runs, tmp_path):
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("Debian's chromium and chromium-driver are required: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    # React re-renders the page while it loads: an element found a moment ago may be gone, so look again.
    wait = WebDriverWait(driver, 120, ignored_exceptions=(StaleElementReferenceException,))

    trigger_button = "//button[normalize-space()='Trigger']"

    def click_trigger(d):
        buttons = d.find_elements(By.XPATH, trigger_button)
        if buttons:
            buttons[0].click()
        return bool(buttons)

    try:
        driver.get(ui_stack.url + "/")
        username, password = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "input[name=username], "
                                                                                    "input[name=password]"))
        username.send_keys(embedded.ADMIN_USER)
        password.send_keys(ui_stack.password)
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait.until(lambda d: "/auth/login" not in d.current_url)

        driver.get(f"{ui_stack.url}/dags/{DAG_ID}")
        wait.until(lambda d: d.find_elements(By.XPATH, trigger_button))
        page = driver.find_element(By.TAG_NAME, "body").text
        assert DAG_ID in page and "forecasting" in page  # the DAG page with its owner
        assert "quality_gate" in page and "wait_for_raw_drop" in page

        wait.until(click_trigger)
        wait.until(lambda d: "Run Parameters" in d.find_element(By.TAG_NAME, "body").text)
        form = driver.find_element(By.TAG_NAME, "body").text
        for title in ("As-of date", "Sample rate", "Epochs", "Horovod processes", "Batch size per process",
                      "Base learning rate", "Learning-rate schedule", "Hidden layer widths", "Warm start",
                      "Warm-start epochs", "Promotion tolerance", "Raw drop timeout (s)"):
            assert title in form, f"trigger form lacks the {title!r} param"
        assert "Backfill" in form  # the same dialog offers backfills over a date range
        driver.save_screenshot(str(tmp_path / "trigger_form.png"))

        # The grid of both finished runs (the DAG page's default view), for docs/figures/dag_grid.png.
        driver.get(f"{ui_stack.url}/dags/{DAG_ID}")
        wait.until(lambda d: "publish_scores" in d.find_element(By.TAG_NAME, "body").text)
        try:   # the grid's run bars link to their runs; drawn a moment after the task names
            WebDriverWait(driver, 30).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "a[href*='/runs/']")) >= 2)
        except TimeoutException:
            pass   # a page drawn otherwise: save_figure still refuses a blank one
        save_figure(driver, "dag_grid.png", tmp_path)

        # The report the predict task's "Forecast report" link opens, for docs/figures/forecast_report.png.
        links = api.call("GET", f"{concurrent_runs[RUN_DATE]['path']}/taskInstances/predict/links")[1]["extra_links"]
        driver.set_window_size(1000, 1400)
        driver.get(links["Forecast report"])
        wait.until(lambda d: "Rossmann sales forecast" in d.find_element(By.TAG_NAME, "body").text)
        wait.until(lambda d: d.execute_script(
            "return Array.from(document.images).every(image => image.complete && image.naturalWidth > 0)"))
        save_figure(driver, "forecast_report.png", tmp_path)
    finally:
        driver.quit()


def test_spark_jobs_of_both_runs_queued_for_the_one_spark_pool(api, concurrent_runs):
    """Both runs were active at once, yet no two spark-submit tasks overlapped: they share the one-slot pool that the
    stack's set-up created, and at least one of them was ready (scheduled) while another held the slot."""
    status, pool = api.call("GET", f"/api/v2/pools/{SPARK_POOL}")
    assert status == 200 and pool["slots"] == 1, pool
    spark = sorted((datetime.fromisoformat(ti["start_date"]), datetime.fromisoformat(ti["end_date"]),
                    datetime.fromisoformat(ti["scheduled_when"]), f"{day} {task}")
                   for day in (BACKFILL_DATE, RUN_DATE) for task, ti in concurrent_runs[day]["tasks"].items()
                   if ti["pool"] == SPARK_POOL and ti["state"] == "success")   # not the skipped scoring tasks
    assert {name.split()[1] for *_, name in spark} >= {"prepare_features", "train_model", "predict"}
    for (_, end, _, first), (start, _, _, second) in zip(spark, spark[1:]):
        assert end <= start, f"{first} and {second} ran at once"
    waited = [later for (_, end, _, _), (start, _, ready, later) in zip(spark, spark[1:]) if ready < end]
    assert waited, spark


def test_backfill_and_triggered_run_ran_at_once_without_interference(ui_stack, concurrent_runs):
    """Two runs active at once: disjoint run-scoped outputs, gates that never interleave, champions as of each date."""
    dates = (BACKFILL_DATE, RUN_DATE)
    runs = {day: concurrent_runs[day] for day in dates}
    assert runs[BACKFILL_DATE]["run"]["run_type"] == "backfill"
    states = {day: run["run"]["state"] for day, run in runs.items()}
    assert states == {day: "success" for day in dates}, {day: {t: ti["state"] for t, ti in run["tasks"].items()}
                                                         for day, run in runs.items()}
    # The backfill's date is the earlier one: no forecast before it to score.
    assert {runs[BACKFILL_DATE]["tasks"][task]["state"] for task in SCORING_TASKS} == {"skipped"}
    first, second = ({key: datetime.fromisoformat(runs[day]["run"][key]) for key in ("start_date", "end_date")}
                     for day in dates)
    assert first["start_date"] < second["end_date"] and second["start_date"] < first["end_date"], (
        "the two runs did not overlap in time", first, second)

    plans = {day: run["plan"] for day, run in runs.items()}
    for day, kind in ((BACKFILL_DATE, "backfill"), (RUN_DATE, "manual")):
        assert plans[day]["as_of"] == day and f"/runs/{day}/{kind}__" in plans[day]["features"]

    # Run-scoped outputs: disjoint prefixes, and each run's forecast read only its own committed features.
    roots = {day: plan["features"].rsplit("/", 1)[0] + "/" for day, plan in plans.items()}
    assert not roots[dates[0]].startswith(roots[dates[1]]) and not roots[dates[1]].startswith(roots[dates[0]])
    for day, plan in plans.items():
        assert {f"{plan[name]}/_SUCCESS" for name in ("features", "model", "predictions")} <= set(
            ui_stack.list_keys(roots[day]))
        summary = ui_stack.read_json(f"{plan['predictions']}/_SUCCESS")["summary"]
        assert summary["features"].startswith(plan["features"] + "/attempts/")
        assert ui_stack.read_json(f"{summary['features']}/metadata.json")["as_of"] == day

    # The gates ran one after the other; each compared against the champion as of its own date (never the later
    # run's), and the newest promoted as-of date's champion is the pointer, whichever gate ran first.
    gate_times = {day: {key: datetime.fromisoformat(run["tasks"]["quality_gate"][key])
                        for key in ("start_date", "end_date")} for day, run in runs.items()}
    earlier, later = sorted(dates, key=lambda day: gate_times[day]["start_date"])
    assert gate_times[earlier]["end_date"] <= gate_times[later]["start_date"], gate_times
    gates = {day: run["gate"] for day, run in runs.items()}
    for day, gate in gates.items():
        assert gate["champion_as_of"] is None or gate["champion_as_of"] <= day, (day, gate)
    # Nothing to compare against as of the earlier date, even if the later run promoted first.
    assert gates[BACKFILL_DATE]["champion_val_exp_rmspe"] is None
    promoted = [day for day, gate in gates.items() if gate["promoted"]]
    assert promoted, gates
    assert ui_stack.read_json(plans[RUN_DATE]["champion"])["as_of"] == max(promoted)


def test_a_finished_tasks_log_is_read_from_the_bucket_after_the_worker_and_its_files_are_gone(ui_stack, api,
                                                                                              concurrent_runs):
    """Remote logging (docker/airflow.env): each try's log is uploaded under the bucket's logs/ prefix, and the
    API serves it from there once the machine that ran the task is gone (here: its log folder, deleted)."""
    import shutil

    rest = concurrent_runs[RUN_DATE]
    run_id = rest["run"]["dag_run_id"]
    prefix = f"s3://{ui_stack.bucket}/logs/dag_id={DAG_ID}/run_id={run_id}/"
    uploaded = ui_stack.list_keys(prefix)
    assert any("task_id=train_model/" in key for key in uploaded), uploaded
    assert any("task_id=publish_forecast/" in key for key in uploaded), uploaded
    local_run = Path(ui_stack.env["AIRFLOW__LOGGING__BASE_LOG_FOLDER"]) / f"dag_id={DAG_ID}" / f"run_id={run_id}"
    assert local_run.is_dir()   # the worker's own copy, until the worker goes
    shutil.rmtree(local_run)

    status, log = api.call("GET", f"{rest['path']}/taskInstances/train_model/logs/1?full_content=true")
    log_text = json.dumps(log)
    assert status == 200 and "Spark-Submit cmd" in log_text and "epoch 1/" in log_text
    assert ui_stack.secret_key not in log_text


def test_the_lineage_events_chain_the_drop_to_the_published_forecast(ui_stack, api, concurrent_runs):
    """Each task's OpenLineage COMPLETE event (plugins/rossmann/lineage.py), followed back from the REST run's
    published forecast: the publication, predict, the gate that pinned the forecasting model, its training and the
    preparation of a drop. (Real worker processes: `airflow dags test` runs every task in one process, whose hook
    lineage collector then carries the earlier tasks' datasets into the later tasks' events.)"""
    rest = concurrent_runs[RUN_DATE]
    run_id, plan, gate = rest["run"]["dag_run_id"], rest["plan"], rest["gate"]
    forecast = api.call("GET", f"{rest['path']}/taskInstances/publish_forecast/xcomEntries/return_value")[1]["value"]
    events = ui_stack.lineage()
    assert {event["task"] for event in events if event["run_id"] == run_id} >= {
        "prepare_features", "train_model", "backtest_season", "quality_gate", "predict", "publish_forecast"}

    def name(uri: str) -> str:
        return uri.replace("s3a://", "s3://", 1).rstrip("/")

    def own(task: str) -> dict:
        [event] = [event for event in events if event["run_id"] == run_id and event["task"] == task]
        return event

    assert name(plan["raw"]) in own("prepare_features")["inputs"]
    assert name(plan["features"]) in own("prepare_features")["outputs"] & own("train_model")["inputs"]
    assert name(plan["model"]) in own("train_model")["outputs"] & own("predict")["inputs"]
    assert name(plan["predictions"]) in own("predict")["outputs"] & own("publish_forecast")["inputs"]
    assert {name(forecast["published_uri"]), name(plan["forecast_record"])} <= own("publish_forecast")["outputs"]
    assert name(gate["champion_model_uri"]) in own("predict")["inputs"]

    # Back from the published copy through whoever wrote each input (the forecasting model may be the other
    # run's champion, pinned by that run's gate).
    seen, frontier, reached = [], {name(forecast["published_uri"])}, set()
    while frontier:
        dataset = frontier.pop()
        reached.add(dataset)
        for event in events:
            if dataset in event["outputs"] and (event["run_id"], event["task"]) not in seen:
                seen.append((event["run_id"], event["task"]))
                frontier |= event["inputs"] - reached
    tasks = {task for _, task in seen}
    assert {"publish_forecast", "predict", "quality_gate", "train_model", "prepare_features"} <= tasks, seen
    assert name(plan["raw"]) in reached
