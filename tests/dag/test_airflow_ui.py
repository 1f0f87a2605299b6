"""The real Airflow components on loopback (api-server, scheduler, dag-processor, triggerer; LocalExecutor on
PostgreSQL): a run triggered through the REST API with params succeeds, and a headless Chromium sees the DAG and its
validated trigger form."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
from stack_helpers import DAG_ID, SCORING_TASKS, SMALL_RUN_CONF, embedded, start_stack

pytestmark = pytest.mark.slow

RUN_DATE = "2015-07-30"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


class Api:
    """A tiny REST client of the Airflow public API, authenticated like a user (POST /auth/token)."""

    def __init__(self, base_url: str, username: str, password: str):
        self.base_url = base_url
        status, body = self.call("POST", "/auth/token", {"username": username, "password": password}, auth=False)
        assert status == 201, body
        self.token = body["access_token"]

    def call(self, method: str, path: str, body: dict | None = None, auth: bool = True):
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.base_url + path, method=method, headers=headers,
                                         data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw.strip().startswith((b"{", b"[")) else raw.decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def wait_for(self, predicate, timeout_s: float, what: str, interval_s: float = 5.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if result := predicate():
                return result
            time.sleep(interval_s)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


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


def test_rest_trigger_with_params_runs_the_dag_to_success(ui_stack, api):
    ui_stack.land(RUN_DATE, RUN_DATE)
    assert api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})[0] == 200

    status, body = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                            {"logical_date": f"{RUN_DATE}T00:00:00Z", "conf": {**SMALL_RUN_CONF, "epochs": 0}})
    assert status == 400 and "epochs" in body, "params must be validated at trigger time"

    status, run = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                           {"logical_date": f"{RUN_DATE}T00:00:00Z", "conf": SMALL_RUN_CONF})
    assert status == 200, run
    run_path = f"/api/v2/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run['dag_run_id'], safe='')}"

    def finished():
        state = api.call("GET", run_path)[1]["state"]
        return state if state in ("success", "failed") else None

    final_state = api.wait_for(finished, 1800, "the triggered run to finish", interval_s=10)
    tasks = {ti["task_id"]: ti["state"] for ti in api.call("GET", f"{run_path}/taskInstances")[1]["task_instances"]}
    assert final_state == "success", tasks
    # The stack's first run: nothing earlier to score, so the short-circuit skips the scoring tasks.
    assert {task: state for task, state in tasks.items() if task in SCORING_TASKS} == {
        task: "skipped" for task in SCORING_TASKS}
    assert {state for task, state in tasks.items() if task not in SCORING_TASKS} == {"success"}

    status, entry = api.call("GET", f"{run_path}/taskInstances/plan_run/xcomEntries/return_value")
    assert status == 200 and entry["value"]["as_of"] == RUN_DATE
    gate = api.call("GET", f"{run_path}/taskInstances/quality_gate/xcomEntries/return_value")[1]["value"]
    metrics = api.call("GET", f"{run_path}/taskInstances/read_train_metrics/xcomEntries/return_value")[1]["value"]
    assert gate["promoted"] is True and gate["candidate_val_exp_rmspe"] == metrics["gate_scores"]["challenger"]
    assert metrics["horovod_size"] == SMALL_RUN_CONF["num_proc"]
    assert run["conf"] == SMALL_RUN_CONF

    status, log = api.call("GET", f"{run_path}/taskInstances/train_model/logs/1?full_content=true")
    log_text = json.dumps(log)
    assert status == 200 and "Spark-Submit cmd" in log_text
    assert ui_stack.secret_key not in log_text
    # Every task log file the scheduler's workers wrote, not only the one the API serves.
    log_files = ui_stack.task_logs()
    assert "Spark-Submit cmd" in log_files and "epoch 1/" in log_files
    assert ui_stack.secret_key not in log_files and "_HOROVOD_SECRET_KEY" not in log_files


def test_headless_browser_sees_the_dag_and_its_trigger_form(ui_stack, api, tmp_path):
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("Debian's chromium and chromium-driver are required: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
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
                      "Base learning rate", "Promotion tolerance", "Raw drop timeout (s)"):
            assert title in form, f"trigger form lacks the {title!r} param"
        assert "Backfill" in form  # the same dialog offers backfills over a date range
        driver.save_screenshot(str(tmp_path / "trigger_form.png"))
    finally:
        driver.quit()


def test_backfill_of_two_dates_runs_them_concurrently_without_interference(ui_stack, api):
    """Two backfill runs active at once: disjoint run-scoped outputs, and gates that never interleave."""
    import subprocess

    dates = ["2015-07-14", "2015-07-15"]
    ui_stack.land(dates[0], dates[-1])
    assert api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})[0] == 200
    command = ["airflow", "backfill", "create", "--dag-id", DAG_ID, "--from-date", dates[0], "--to-date", dates[-1],
               "--max-active-runs", "2", "--dag-run-conf", json.dumps(SMALL_RUN_CONF)]
    created = subprocess.run(command, env=ui_stack.process_env(), capture_output=True, text=True, timeout=300)
    assert created.returncode == 0, f"airflow backfill create failed:\n{created.stdout}\n{created.stderr}"

    def backfill_runs():
        runs = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")[1]["dag_runs"]
        done = {run["logical_date"][:10]: run for run in runs if run["run_type"] == "backfill"
                and run["logical_date"][:10] in dates and run["state"] in ("success", "failed")}
        return done if len(done) == len(dates) else None

    runs = api.wait_for(backfill_runs, 2400, "both backfill runs to finish", interval_s=10)
    assert {day: run["state"] for day, run in runs.items()} == {day: "success" for day in dates}
    first, second = ({key: datetime.fromisoformat(runs[day][key]) for key in ("start_date", "end_date")}
                     for day in dates)
    assert first["start_date"] < second["end_date"] and second["start_date"] < first["end_date"], (
        "the two backfill runs did not overlap in time", first, second)

    plans, gates, gate_tis = {}, {}, {}
    for day, run in runs.items():
        run_path = f"/api/v2/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run['dag_run_id'], safe='')}"
        plans[day] = api.call("GET", f"{run_path}/taskInstances/plan_run/xcomEntries/return_value")[1]["value"]
        gates[day] = api.call("GET", f"{run_path}/taskInstances/quality_gate/xcomEntries/return_value")[1]["value"]
        gate_tis[day] = api.call("GET", f"{run_path}/taskInstances/quality_gate")[1]
        assert plans[day]["as_of"] == day and f"/runs/{day}/backfill__" in plans[day]["features"]

    # Run-scoped outputs: disjoint prefixes, and each run's forecast read only its own committed features.
    roots = {day: plan["features"].rsplit("/", 1)[0] + "/" for day, plan in plans.items()}
    assert not roots[dates[0]].startswith(roots[dates[1]]) and not roots[dates[1]].startswith(roots[dates[0]])
    for day, plan in plans.items():
        assert {f"{plan[name]}/_SUCCESS" for name in ("features", "model", "predictions")} <= set(
            ui_stack.list_keys(roots[day]))
        summary = ui_stack.read_json(f"{plan['predictions']}/_SUCCESS")["summary"]
        assert summary["features"].startswith(plan["features"] + "/attempts/")
        assert ui_stack.read_json(f"{summary['features']}/metadata.json")["as_of"] == day

    # The gates ran one after the other; each compared against the champion as of its own date that its train job
    # scored (never the later RUN_DATE run's champion), and the newest as-of date's champion stays the pointer.
    gate_times = {day: {key: datetime.fromisoformat(ti[key]) for key in ("start_date", "end_date")}
                  for day, ti in gate_tis.items()}
    earlier, later = sorted(dates, key=lambda day: gate_times[day]["start_date"])
    assert gate_times[earlier]["end_date"] <= gate_times[later]["start_date"], gate_times
    for day, gate in gates.items():
        assert gate["champion_as_of"] <= day, (day, gate)
    champion = ui_stack.read_json(plans[dates[0]]["champion"])
    assert champion["as_of"] == RUN_DATE
