"""Who the embedded S3 server answers (scripts/stack/s3_guard.py in front of moto): signed requests of the stack's key
for a loopback Host, from boto3, presigned URLs and pyarrow; never an anonymous or wrongly signed request, moto's
control API, a CORS preflight or a rebound host name. Each refusal has its negative control: the same request
answered by moto's own server, which the embedded stack ran before."""
from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request

import pytest

from stack_helpers import embedded

B = embedded.DEFAULT_BUCKET
KEY = "forecast/a dir/latest+1=x:y.json"   # a space, '+', '=' and ':' in the key: what the encodings differ on
BODY = b'{"as_of": "2015-07-31"}'


def client(endpoint: str, access_key: str, secret: str):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=access_key,
                        aws_secret_access_key=secret, config=Config(signature_version="s3v4",
                                                                    retries={"max_attempts": 1}))


def plain(endpoint: str, method: str, path: str, headers: dict | None = None, data: bytes | None = None):
    """(status, headers, body) of an unsigned request."""
    request = urllib.request.Request(endpoint + path, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    state = embedded.Stack(tmp_path_factory.mktemp("guarded-s3"))
    endpoint = embedded.start_s3(state, port=embedded.free_port())
    keys = embedded.stack_secrets(state)
    s3 = client(endpoint, keys["s3_access_key_id"], keys["s3_secret_access_key"])
    s3.put_object(Bucket=B, Key=KEY, Body=BODY)
    try:
        yield endpoint, keys, s3
    finally:
        embedded.stop_process(state, "moto")


@pytest.fixture(scope="module")
def unguarded():
    """moto's own server (what scripts/stack/s3_server.py wrapped before): the negative control."""
    port = embedded.free_port()
    process = subprocess.Popen([str(embedded.JOBS_BIN / "python"), "-m", "moto.server", "-H", "127.0.0.1",
                                "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
            break
        except OSError:
            time.sleep(0.3)
    s3 = client(endpoint, "any", "thing")
    s3.create_bucket(Bucket=B)
    s3.put_object(Bucket=B, Key=KEY, Body=BODY)
    try:
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=30)


def object_path(key: str = KEY) -> str:
    from urllib.parse import quote

    return f"/{B}/{quote(key)}"


def test_signed_requests_of_the_stacks_key_are_answered(guarded, tmp_path):
    endpoint, keys, s3 = guarded
    assert s3.get_object(Bucket=B, Key=KEY)["Body"].read() == BODY
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=B, Prefix="forecast/a dir/")["Contents"]] == [KEY]
    url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": KEY}, ExpiresIn=60)
    assert plain(endpoint, "GET", url[len(endpoint):])[::2] == (200, BODY)   # the report link's kind of URL

    import pyarrow.fs as pafs  # the jobs' own reads and writes (rossmann_jobs/storage.py)

    fs = pafs.S3FileSystem(access_key=keys["s3_access_key_id"], secret_key=keys["s3_secret_access_key"],
                           endpoint_override=endpoint, scheme="http", region="us-east-1")
    with fs.open_output_stream(f"{B}/runs/pyarrow.txt") as handle:
        handle.write(b"written by pyarrow")
    assert s3.get_object(Bucket=B, Key="runs/pyarrow.txt")["Body"].read() == b"written by pyarrow"


def test_anonymous_and_wrongly_signed_requests_are_refused(guarded, unguarded):
    endpoint, keys, _ = guarded
    # control: moto lists a bucket and takes a write from anyone (it refuses only an anonymous object GET)
    assert plain(unguarded, "PUT", object_path("raw/planted.csv"), data=b"x")[0] == 200
    assert b"raw/planted.csv" in plain(unguarded, "GET", f"/{B}?list-type=2")[2]
    for method, path, data in (("GET", object_path(), None), ("GET", f"/{B}?list-type=2", None),
                               ("PUT", object_path("raw/planted.csv"), b"x"), ("DELETE", object_path(), None)):
        status, _, body = plain(endpoint, method, path, data=data)
        assert status == 403 and b"anonymous" in body and KEY.encode() not in body, (method, path)

    from botocore.exceptions import ClientError

    for access_key, secret, code in ((keys["s3_access_key_id"], "not-the-secret", "SignatureDoesNotMatch"),
                                     ("someone-else", keys["s3_secret_access_key"], "InvalidAccessKeyId")):
        with pytest.raises(ClientError) as refused:
            client(endpoint, access_key, secret).get_object(Bucket=B, Key=KEY)
        assert refused.value.response["Error"]["Code"] == code
    client(unguarded, "someone-else", "not-the-secret").get_object(Bucket=B, Key=KEY)   # control


def test_a_tampered_or_expired_presigned_url_is_refused(guarded):
    endpoint, _, s3 = guarded
    url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": KEY}, ExpiresIn=1)
    other = url[len(endpoint):].replace("latest%2B1", "latest%2B2")   # the same signature for another object
    assert plain(endpoint, "GET", other)[0] == 403
    time.sleep(2.1)
    status, _, body = plain(endpoint, "GET", url[len(endpoint):])
    assert status == 403 and b"expired" in body


def test_a_body_that_is_not_the_signed_one_is_refused(guarded):
    """A signature covers the declared SHA-256 of the body: a captured request cannot carry other bytes."""
    endpoint, _, s3 = guarded
    captured = {}

    def swap_body(request, **_):
        captured["headers"] = dict(request.headers)
        request.body = b"x" * len(BODY)   # the same length: only the bytes differ

    s3.meta.events.register_first("before-send.s3.PutObject", swap_body)
    try:
        from botocore.exceptions import ClientError

        with pytest.raises(ClientError) as refused:
            s3.put_object(Bucket=B, Key="forecast/swapped.json", Body=BODY)
        assert refused.value.response["Error"]["Code"] == "XAmzContentSHA256Mismatch"
    finally:
        s3.meta.events.unregister("before-send.s3.PutObject", swap_body)
    assert "forecast/swapped.json" not in [o["Key"] for o in s3.list_objects_v2(Bucket=B)["Contents"]]


def test_motos_control_api_is_refused_and_the_data_survives(guarded, unguarded):
    endpoint, _, s3 = guarded
    status, _, body = plain(endpoint, "POST", "/moto-api/reset")
    assert status == 403
    assert plain(endpoint, "GET", "/moto-api/")[0] == 403
    assert s3.get_object(Bucket=B, Key=KEY)["Body"].read() == BODY
    assert plain(unguarded, "POST", "/moto-api/reset")[0] == 200   # control: moto wipes every bucket
    assert plain(unguarded, "GET", f"/{B}")[0] == 404


def test_no_cross_origin_access(guarded, unguarded):
    endpoint, _, s3 = guarded
    preflight = {"Origin": "http://attacker.example", "Access-Control-Request-Method": "PUT"}
    status, headers, _ = plain(endpoint, "OPTIONS", object_path(), preflight)
    assert status == 403 and not [h for h in headers if h.lower().startswith("access-control-")]
    # control: moto lets any web page read what it answers, the list of buckets here (it echoes the page's origin)
    control_status, control_headers, _ = plain(unguarded, "GET", "/", preflight)
    assert control_status == 200 and control_headers.get("Access-Control-Allow-Origin") == "http://attacker.example"

    seen = {}
    s3.meta.events.register("after-call.s3.GetObject", lambda http_response, **_: seen.update(http_response.headers))
    s3.meta.events.register("before-sign.s3.GetObject",
                            lambda request, **_: request.headers.__setitem__("Origin", "http://attacker.example"))
    assert s3.get_object(Bucket=B, Key=KEY)["Body"].read() == BODY
    assert seen and not [h for h in seen if h.lower().startswith("access-control-")]


def test_a_host_that_is_not_loopback_is_refused(guarded):
    """DNS rebinding: a page on attacker.example whose name now resolves to 127.0.0.1 sends Host: attacker.example."""
    endpoint, _, s3 = guarded
    url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": KEY}, ExpiresIn=60)
    port = endpoint.rsplit(":", 1)[1]
    for host in (f"attacker.example:{port}", "127.0.0.1:1", "attacker.example"):
        status, _, body = plain(endpoint, "GET", url[len(endpoint):], {"Host": host})
        assert status == 403 and b"loopback" in body, host
    assert plain(endpoint, "GET", url[len(endpoint):], {"Host": f"localhost:{port}"})[0] == 403   # signed for 127.0.0.1
