"""Who may call the embedded S3 server: a WSGI layer in front of moto that answers only signed requests for a
loopback host, refuses moto's control API and gives browsers no cross-origin access.

moto itself checks no signature, answers any origin and exposes /moto-api/reset, so any local process or any web
page open on the developer's machine could read, overwrite or wipe the stack's bucket. Here every request must
carry an AWS Signature Version 4 (an Authorization header, or a presigned URL's query) made with one of the stack's
keys; the signature is recomputed with that key's secret and compared. A request whose Host is not the loopback
address (DNS rebinding) is refused before anything else.
"""
from __future__ import annotations

import hashlib
import hmac
import io
import json
import re
import time
from calendar import timegm
from urllib.parse import quote, unquote_plus

ALGORITHM = "AWS4-HMAC-SHA256"
HEALTH_PATH = "/-/health"      # not a bucket name (a bucket cannot start with '-'); answers 200 with no data
MAX_CLOCK_SKEW_S = 15 * 60     # as AWS: a signed header request older or newer than this is refused
MAX_PRESIGNED_EXPIRY_S = 7 * 24 * 3600
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_CREDENTIAL = re.compile(r"Credential=([^,\s]+)")
_SIGNED_HEADERS = re.compile(r"SignedHeaders=([^,\s]+)")
_SIGNATURE = re.compile(r"Signature=([0-9a-f]{64})")
_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")


class Refused(Exception):
    def __init__(self, status: str, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def load_credentials(path: str) -> dict[str, str]:
    """{access key id: secret} from a JSON file of that shape (written by the stack, readable by its owner only)."""
    with open(path) as handle:
        keys = json.load(handle)
    if not isinstance(keys, dict) or not keys or not all(isinstance(v, str) and v for v in keys.values()):
        raise ValueError(f"{path}: expected a JSON object of access key id -> secret, with at least one key")
    return keys


def _uri_encode(text: str) -> str:
    return quote(text, safe="-_.~")


def canonical_query(raw_query: str, leave_out: str | None = None) -> str:
    pairs = []
    for part in raw_query.split("&") if raw_query else []:
        name, _, value = part.partition("=")
        # A '+' in a query is a space (the Java SDK sends one so, and signs %20), as S3 reads it.
        name, value = unquote_plus(name), unquote_plus(value)
        if name != leave_out:
            pairs.append((_uri_encode(name), _uri_encode(value)))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def _header(environ: dict, name: str) -> str | None:
    if name == "content-type":
        return environ.get("CONTENT_TYPE")
    if name == "content-length":
        return environ.get("CONTENT_LENGTH")
    return environ.get("HTTP_" + name.upper().replace("-", "_"))


def canonical_headers(environ: dict, signed: list[str]) -> str:
    lines = []
    for name in signed:
        value = _header(environ, name)
        if value is None:
            raise Refused("403 Forbidden", "AccessDenied", f"signed header {name!r} is not in the request")
        lines.append(f"{name}:{' '.join(value.split())}\n")
    return "".join(lines)


def signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    key = hmac.new(f"AWS4{secret}".encode(), day.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _parse_time(amz_date: str) -> int:
    try:
        return timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
    except (TypeError, ValueError):
        raise Refused("403 Forbidden", "AccessDenied", "the request's X-Amz-Date is missing or malformed") from None


def raw_path_and_query(environ: dict) -> tuple[str, str]:
    """The path and query exactly as the client sent them (what it signed), not WSGI's decoded PATH_INFO."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw is None:
        raw = quote(environ.get("PATH_INFO", "/"), safe="/-_.~")
        query = environ.get("QUERY_STRING", "")
        return raw, query
    if "://" in raw:   # an absolute-form request target
        raw = "/" + raw.split("://", 1)[1].partition("/")[2]
    path, _, query = raw.partition("?")
    return path or "/", query


def check_signature(environ: dict, keys: dict[str, str], now: float | None = None) -> str:
    """Returns the access key id of a correctly signed request; raises Refused otherwise."""
    now = time.time() if now is None else now
    path, query = raw_path_and_query(environ)
    authorization = environ.get("HTTP_AUTHORIZATION", "")
    params = {unquote_plus(p.partition("=")[0]): unquote_plus(p.partition("=")[2]) for p in query.split("&") if p}
    if authorization:
        if not authorization.startswith(ALGORITHM + " "):
            raise Refused("403 Forbidden", "AccessDenied",
                          "only AWS Signature Version 4 is accepted (Authorization: AWS4-HMAC-SHA256 ...)")
        found = [pattern.search(authorization) for pattern in (_CREDENTIAL, _SIGNED_HEADERS, _SIGNATURE)]
        if not all(found):
            raise Refused("403 Forbidden", "AccessDenied", "malformed Authorization header")
        credential, signed_headers, signature = (m.group(1) for m in found)
        amz_date = _header(environ, "x-amz-date") or ""
        if abs(now - _parse_time(amz_date)) > MAX_CLOCK_SKEW_S:
            raise Refused("403 Forbidden", "RequestTimeTooSkewed", "the request's time is too far from the server's")
        payload = _header(environ, "x-amz-content-sha256") or hashlib.sha256(b"").hexdigest()
        query_text = canonical_query(query)
    elif "X-Amz-Signature" in params:
        if params.get("X-Amz-Algorithm") != ALGORITHM:
            raise Refused("403 Forbidden", "AccessDenied", "only AWS Signature Version 4 presigned URLs are accepted")
        credential, signed_headers = params.get("X-Amz-Credential", ""), params.get("X-Amz-SignedHeaders", "")
        signature, amz_date = params["X-Amz-Signature"], params.get("X-Amz-Date", "")
        expires = params.get("X-Amz-Expires", "")
        if not expires.isdigit() or int(expires) > MAX_PRESIGNED_EXPIRY_S:
            raise Refused("403 Forbidden", "AuthorizationQueryParametersError", "X-Amz-Expires missing or too long")
        signed_at = _parse_time(amz_date)
        if now > signed_at + int(expires) or now < signed_at - MAX_CLOCK_SKEW_S:
            raise Refused("403 Forbidden", "AccessDenied", "the presigned URL has expired or is not valid yet")
        payload = "UNSIGNED-PAYLOAD"
        query_text = canonical_query(query, leave_out="X-Amz-Signature")
    else:
        raise Refused("403 Forbidden", "AccessDenied", "anonymous requests are refused: sign with the stack's key")
    access_key, _, scope = credential.partition("/")
    scope_parts = scope.split("/")
    if len(scope_parts) != 4 or scope_parts[3] != "aws4_request" or scope_parts[0] != amz_date[:8]:
        raise Refused("403 Forbidden", "AccessDenied", "malformed credential scope")
    secret = keys.get(access_key)
    if secret is None:
        raise Refused("403 Forbidden", "InvalidAccessKeyId", "the access key id is not one of this server's")
    signed = signed_headers.split(";")
    if "host" not in signed:
        raise Refused("403 Forbidden", "AccessDenied", "the signature must cover the Host header")
    canonical_request = "\n".join([environ.get("REQUEST_METHOD", "GET"), path, query_text,
                                   canonical_headers(environ, signed), signed_headers, payload])
    string_to_sign = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(canonical_request.encode()).hexdigest()])
    expected = hmac.new(signing_key(secret, *scope_parts[:3]), string_to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        raise Refused("403 Forbidden", "SignatureDoesNotMatch", "the request's signature does not match")
    return access_key


def check_host(environ: dict, port: int) -> None:
    host = environ.get("HTTP_HOST", "")
    if host not in {f"{name}:{port}" for name in LOOPBACK_HOSTS}:
        raise Refused("403 Forbidden", "AccessDenied", "the Host header must name this server's loopback address")


def _error_body(error: Refused) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{error.code}</Code>'
            f"<Message>{error.message}</Message></Error>").encode()


class GuardedApp:
    """The checks, in order: loopback Host; the health path; no moto control API, no CORS preflight; a valid
    signature. Responses lose any Access-Control-* header, so no web page can read what a signed request got."""

    def __init__(self, app, keys: dict[str, str], port: int, log=None):
        self.app, self.keys, self.port, self.log = app, keys, port, log

    def __call__(self, environ, start_response):
        try:
            check_host(environ, self.port)
            path = environ.get("PATH_INFO", "/")
            if path == HEALTH_PATH and environ.get("REQUEST_METHOD") in ("GET", "HEAD"):
                start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
                return [b"ok"]
            if path == "/moto-api" or path.startswith("/moto-api/"):
                raise Refused("403 Forbidden", "AccessDenied", "the S3 server's control API is disabled")
            if environ.get("REQUEST_METHOD") == "OPTIONS":
                raise Refused("403 Forbidden", "AccessDenied", "cross-origin requests are not answered")
            self._check_payload(environ)
            check_signature(environ, self.keys)
        except Refused as error:
            if self.log:
                self.log.warning("refused %s %s from %s: %s", environ.get("REQUEST_METHOD"),
                                 environ.get("PATH_INFO"), environ.get("REMOTE_ADDR"), error.code)
            body = _error_body(error)
            start_response(error.status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
            return [body]

        def without_cors(status, headers, exc_info=None):
            kept = [(k, v) for k, v in headers if not k.lower().startswith("access-control-")]
            return start_response(status, kept, exc_info)

        return self.app(environ, without_cors)

    @staticmethod
    def _check_payload(environ: dict) -> None:
        """A body whose SHA-256 is declared (and signed) must have it: a captured signature carries no other body."""
        declared = _header(environ, "x-amz-content-sha256") or ""
        if not _HEX_SHA256.fullmatch(declared):
            return   # UNSIGNED-PAYLOAD or a streaming (aws-chunked) upload: the first signature covers the headers
        length = environ.get("CONTENT_LENGTH")
        body = environ["wsgi.input"].read(int(length)) if length and length.isdigit() else b""
        environ["wsgi.input"] = io.BytesIO(body)
        if hashlib.sha256(body).hexdigest() != declared:
            raise Refused("400 Bad Request", "XAmzContentSHA256Mismatch", "the body does not match its SHA-256")
