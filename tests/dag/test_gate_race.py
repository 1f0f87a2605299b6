"""Quality gates that race on the embedded S3 server (S3Hook, conditional PUTs): every run decides against what it
replaces, so two runs for one date cannot both promote, and a backfill never moves the champion pointer back."""
from __future__ import annotations

import json
import threading

import pytest

from stack_helpers import embedded
from test_gate import scores, trained

CONN_ID = "aws_gate_race"
B = embedded.DEFAULT_BUCKET


@pytest.fixture(scope="module")
def s3_conn(tmp_path_factory):
    """The embedded S3 server (scripts/stack/s3_server.py, as the demo runs it, with its bucket) and an Airflow
    connection to it."""
    state = embedded.Stack(tmp_path_factory.mktemp("gate-race-s3"))
    endpoint = embedded.start_s3(state, port=embedded.free_port())
    keys = embedded.stack_secrets(state)
    conn = {"conn_type": "aws", "login": keys["s3_access_key_id"], "password": keys["s3_secret_access_key"],
            "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    patch = pytest.MonkeyPatch()
    patch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn))
    try:
        yield CONN_ID
    finally:
        patch.undo()
        embedded.stop_process(state, "moto")


@pytest.fixture
def empty_bucket(s3_conn):
    """An S3Hook on the bucket, emptied first."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    hook = S3Hook(aws_conn_id=s3_conn)
    keys = hook.list_keys(bucket_name=B) or []
    if keys:
        hook.delete_objects(B, keys)
    return hook


class OrderedWrites:
    """Holds each run's first write of `key` until every run is about to write it (so each has read and decided
    before any writes: the interleaving of a race), then lets the writes through one at a time in `order`."""

    def __init__(self, key: str, order: list[str]):
        self.key, self.order = key, order
        self.all_read = threading.Barrier(len(order))
        self.written = {run: threading.Event() for run in order}
        self.held: set[str] = set()

    def write(self, run: str, key: str, do):
        if key != self.key or run in self.held:
            return do()
        self.held.add(run)
        self.all_read.wait(timeout=60)
        position = self.order.index(run)
        if position:
            assert self.written[self.order[position - 1]].wait(timeout=60)
        try:
            return do()
        finally:
            self.written[run].set()


def racing_hook(run: str, writes: OrderedWrites):
    """An S3Hook of one run whose writes of the raced key go through `writes`: a conditional PUT of the boto3
    client, or S3Hook.load_string (how the gate wrote before its compare-and-set; kept so this test runs on it)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    class Client:
        def __init__(self, client):
            self.client = client

        def __getattr__(self, name):
            return getattr(self.client, name)

        def put_object(self, **kwargs):
            return writes.write(run, kwargs["Key"], lambda: self.client.put_object(**kwargs))

    class RacingHook(S3Hook):
        def get_conn(self):
            return Client(super().get_conn())

        def load_string(self, string_data, key, bucket_name=None, **kwargs):
            return writes.write(run, key, lambda: super(RacingHook, self).load_string(string_data, key, bucket_name,
                                                                                      **kwargs))

    return RacingHook(aws_conn_id=CONN_ID)


def race(gates: dict[str, callable]) -> dict[str, object]:
    """Run each gate in its own thread at once; what each returned or raised."""
    outcome: dict[str, object] = {}

    def run(name, gate):
        try:
            outcome[name] = gate()
        except Exception as exc:   # noqa: BLE001 (the outcome under test)
            outcome[name] = exc

    threads = [threading.Thread(target=run, args=item) for item in gates.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return outcome


def test_two_runs_for_one_date_cannot_both_promote(empty_bucket):
    """Both runs found no champion and trained; both gates read the history before either writes. The first
    record wins; the second run's conditional PUT fails, it re-reads the winner's record, which its train job never
    scored, and stops clearly instead of replacing it (before: both promoted, the last write silently won)."""
    from rossmann.forecast_tasks import apply_quality_gate
    from rossmann.gate import ScoredChampionError
    from rossmann.uris import run_key

    setups = {run: trained(empty_bucket, "2015-07-31", run, scores(challenger, 0.5), B)
              for run, challenger in (("r1", 0.20), ("r2", 0.10))}
    writes = OrderedWrites("models/champions/history/2015-07-31.json", ["r1", "r2"])
    outcome = race({run: (lambda run=run: apply_quality_gate(racing_hook(run, writes), *setups[run], 0.0, run))
                    for run in setups})

    assert outcome["r1"]["promoted"] is True
    assert isinstance(outcome["r2"], ScoredChampionError), outcome["r2"]
    assert f"names s3://{B}/models/champions/2015-07-31/{run_key('r1')}/a-r1 (run r1" in str(outcome["r2"])
    assert "did not score" in str(outcome["r2"]) and "clear find_champion" in str(outcome["r2"])
    record = json.loads(empty_bucket.read_key("models/champions/history/2015-07-31.json", B))
    pointer = json.loads(empty_bucket.read_key("models/champion.json", B))
    assert record["run_id"] == pointer["run_id"] == "r1"


def test_a_backfill_never_moves_the_champion_pointer_back(empty_bucket):
    """Runs for 07-31 and (a backfill) 07-30 promote at once, each into its own record; both read
    models/champion.json before either writes it, and the 07-31 run writes first. The backfill's conditional PUT
    fails, it re-reads the pointer and leaves it on 07-31 (before: its stale read let it point back to 07-30)."""
    from rossmann.forecast_tasks import apply_quality_gate

    setups = {"r31": trained(empty_bucket, "2015-07-31", "r31", scores(0.20, 0.5), B),
              "r30": trained(empty_bucket, "2015-07-30", "r30", scores(0.20, 0.5), B)}
    writes = OrderedWrites("models/champion.json", ["r31", "r30"])
    outcome = race({run: (lambda run=run: apply_quality_gate(racing_hook(run, writes), *setups[run], 0.0, run))
                    for run in setups})

    assert outcome["r31"]["promoted"] is True and outcome["r30"]["promoted"] is True, outcome
    assert json.loads(empty_bucket.read_key("models/champion.json", B))["as_of"] == "2015-07-31"
    assert json.loads(empty_bucket.read_key("models/champions/history/2015-07-30.json", B))["run_id"] == "r30"


def test_the_embedded_s3_refuses_a_stale_conditional_put(empty_bucket):
    """The server the demo and these tests run honours If-None-Match and If-Match (the guard rests on it)."""
    from rossmann.outputs import ConcurrentUpdateError, read_json_versioned, write_json_if

    uri = f"s3://{B}/models/champion.json"
    write_json_if(empty_bucket, uri, {"as_of": "2015-07-30"}, None)
    with pytest.raises(ConcurrentUpdateError, match="If-None-Match"):
        write_json_if(empty_bucket, uri, {"as_of": "2015-07-31"}, None)
    current, etag = read_json_versioned(empty_bucket, uri)
    write_json_if(empty_bucket, uri, {"as_of": "2015-07-31"}, etag)
    with pytest.raises(ConcurrentUpdateError, match="If-Match"):
        write_json_if(empty_bucket, uri, {"as_of": "2015-08-01"}, etag)   # the version read is gone
    assert current == {"as_of": "2015-07-30"}
    assert read_json_versioned(empty_bucket, uri)[0] == {"as_of": "2015-07-31"}
    assert read_json_versioned(empty_bucket, f"s3://{B}/models/none.json") == (None, None)


def test_of_simultaneous_first_writes_exactly_one_wins(empty_bucket):
    """The server decides a conditional PUT's condition and write as one step (s3_server.py serialises writes), as
    S3 does: of 8 runs creating the same record at once, one succeeds and 7 are told they lost."""
    from rossmann.outputs import ConcurrentUpdateError, write_json_if

    uri, start = f"s3://{B}/models/champions/history/2015-07-31.json", threading.Barrier(8)

    def create(run):
        start.wait(timeout=60)
        try:
            write_json_if(empty_bucket, uri, {"run_id": run}, None)
            return "won"
        except ConcurrentUpdateError:
            return "lost"

    outcome = race({f"r{n}": (lambda n=n: create(f"r{n}")) for n in range(8)})
    assert sorted(outcome.values()) == ["lost"] * 7 + ["won"], outcome
    winner = [run for run, result in outcome.items() if result == "won"]
    assert json.loads(empty_bucket.read_key("models/champions/history/2015-07-31.json", B))["run_id"] == winner[0]
