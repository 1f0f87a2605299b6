#!/usr/bin/env python3
"""The embedded stack's S3 server: moto's, with its buckets and objects kept on disk across stops and crashes.

    python scripts/stack/s3_server.py -H 127.0.0.1 -p 5000 --data-dir DIR --credentials FILE [--interval 1.0]

moto keeps everything in memory, so stopping the demo lost the champion and the forecasts while Airflow's database
still pointed at them. MinIO, the usual answer, is in neither PyPI nor Debian (and its image cannot be pulled
here); the other S3 servers tried were worse (bench/RESULTS.md, "Embedded S3 on disk"). This patches moto's
FakeKey storage and pickles its S3 backend state, so moto stays pinned (constraints/jobs.txt) and
tests/dag/test_stack_processes.py checks a restart.

Same HTTP app as `moto_server` (moto.moto_server.werkzeug_app on werkzeug's threaded server) behind s3_guard.py:
only requests signed with a key of --credentials, for a loopback Host, are answered; /moto-api/ and CORS are off.
What changes:
  * object bytes: FakeKey's value setter writes each value once to DIR/blobs/<uuid> (immutable, never
    rewritten) instead of a SpooledTemporaryFile; reads come from that file, so memory stays small.
  * metadata: the S3 backends' state (buckets and their settings, keys as blob references, multipart
    uploads in progress, tags, bucket->account map) is pickled to DIR/state.pickle (temporary file +
    os.replace: a reader always sees one whole snapshot) by a background thread, at most --interval
    seconds after a mutating request (anything but GET/HEAD/OPTIONS), and stretched to 4x the last
    snapshot's cost so that big states don't starve writers. Mutating requests and the pickling exclude
    each other (one lock; request bodies are read before taking it), so every snapshot is the state after
    some complete prefix of the acknowledged writes.
  * SIGTERM/SIGINT: waits for the request in flight, writes a final snapshot, exits 0: nothing is lost.
    kill -9 / crash: the state of the last snapshot comes back, i.e. writes acknowledged within about the
    last --interval seconds may be missing (never a torn object or a half-applied request). --interval 0
    snapshots before each mutating response is sent (nothing acknowledged is lost; each write then costs
    one snapshot, O(number of keys)). --fsync adds power-cut safety.
  * blobs no longer referenced are deleted at start and after a snapshot every --gc-interval seconds.
  * a snapshot that cannot be loaded (e.g. written by another moto version) is moved aside with its blobs
    (state.pickle.broken-<time>, blobs.broken-<time>), and the server starts empty (logged as an error).
"""
from __future__ import annotations

import argparse
import io
import logging
import os
import pickle
import signal
import sys
import threading
import time
import uuid

import s3_guard

log = logging.getLogger("rossmann.s3_server")

STATE_VERSION = 1
BACKEND_ATTRS = ("buckets", "table_buckets", "tagger", "inventory_configs")


class BlobBuffer:
    """Read-only stand-in for FakeKey._value_buffer: the bytes live in <blob dir>/<name>."""

    directory = ""

    def __init__(self, name: str | None):
        self.name, self.pos = name, 0

    def _path(self) -> str:
        return os.path.join(self.directory, self.name)

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: os.path.getsize(self._path()) if self.name else 0}[whence]
        self.pos = base + pos
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, size: int | None = -1) -> bytes:
        if not self.name:
            return b""
        with open(self._path(), "rb") as f:
            f.seek(self.pos)
            data = f.read() if size is None or size < 0 else f.read(size)
        self.pos += len(data)
        return data

    def close(self) -> None:
        pass


class Store:
    def __init__(self, data_dir: str, fsync: bool):
        self.blob_dir = os.path.join(data_dir, "blobs")
        self.state_path = os.path.join(data_dir, "state.pickle")
        self.fsync = fsync
        os.makedirs(self.blob_dir, exist_ok=True)
        BlobBuffer.directory = self.blob_dir
        self.lock = threading.Lock()          # mutating requests vs. pickling
        self.fresh_lock = threading.Lock()
        self.fresh: set[str] = set()          # blobs written since the last pickling began
        self.referenced: set[str] | None = None
        self.generation = 0                   # mutating requests completed
        self.saved_generation = 0             # ... of which the snapshot on disk includes
        self.saved = threading.Condition()
        self.write_lock = threading.Lock()
        self.last_cost = 0.0

    def write_file(self, path: str, data: bytes) -> None:
        tmp = f"{path}.tmp{threading.get_ident()}"
        with open(tmp, "wb") as f:
            f.write(data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)

    # --- moto patch ----------------------------------------------------------------------------------------
    def patch_moto(self) -> None:
        from moto.s3 import models
        store = self

        def set_value(key, new_value) -> None:
            if isinstance(new_value, str):
                new_value = new_value.encode("utf-8")
            new_value = bytes(new_value)
            name = uuid.uuid4().hex
            with store.fresh_lock:
                store.fresh.add(name)
            store.write_file(os.path.join(store.blob_dir, name), new_value)
            key._value_buffer = BlobBuffer(name)
            key.contentsize = len(new_value)

        def getstate(key) -> dict:
            state = key.__dict__.copy()
            state.pop("lock", None)
            buf = state.pop("_value_buffer", None)
            state["_blob"] = buf.name if isinstance(buf, BlobBuffer) else None
            if store.referenced is not None and state["_blob"]:
                store.referenced.add(state["_blob"])
            return state

        def setstate(key, state: dict) -> None:
            state = dict(state)
            blob = state.pop("_blob", None)
            key.__dict__.update(state)
            key._value_buffer = BlobBuffer(blob)
            key.lock = threading.Lock()

        models.FakeKey.value = property(models.FakeKey.value.fget, set_value)
        models.FakeKey.__getstate__ = getstate
        models.FakeKey.__setstate__ = setstate

    # --- snapshot / restore --------------------------------------------------------------------------------
    def pickle_state(self) -> tuple[bytes, set[str], set[str], int]:
        """Caller holds self.lock. Returns (pickle, blobs it references, blobs written since last time, gen)."""
        from moto.s3.models import s3_backends

        state = {"version": STATE_VERSION, "bucket_accounts": dict(s3_backends.bucket_accounts), "backends": {}}
        for account_id, per_partition in list(s3_backends.items()):
            for partition, backend in list(per_partition.items()):
                state["backends"][(account_id, partition)] = {
                    a: getattr(backend, a) for a in BACKEND_ATTRS if hasattr(backend, a)}
        refs: set[str] = set()
        self.referenced = refs
        try:
            data = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            self.referenced = None
        with self.fresh_lock:
            fresh, self.fresh = self.fresh, set()
        return data, refs, fresh, self.generation

    def save(self, gc: bool = False, startup: bool = False, then_exit: bool = False) -> None:
        t0 = time.monotonic()
        with self.lock:
            data, refs, _, generation = self.pickle_state()
            if gc or then_exit:  # written under the lock: no blob can appear unseen before the clean-up,
                self.write_snapshot(data, generation)  # and no write can be answered after the last snapshot
                if then_exit:
                    os._exit(0)
        if not gc:
            self.write_snapshot(data, generation)
        self.last_cost = time.monotonic() - t0
        if gc:
            self.gc(refs, startup)

    def write_snapshot(self, data: bytes, generation: int) -> None:
        with self.write_lock:
            if generation < self.saved_generation:
                return  # a newer snapshot is on disk already
            self.write_file(self.state_path, data)
            with self.saved:
                self.saved_generation = generation
                self.saved.notify_all()

    def gc(self, refs: set[str], startup: bool) -> int:
        with self.fresh_lock:
            keep = refs | self.fresh
        removed = 0
        for name in os.listdir(self.blob_dir):
            if name not in keep and (startup or ".tmp" not in name):
                try:
                    os.remove(os.path.join(self.blob_dir, name))
                    removed += 1
                except FileNotFoundError:
                    pass
        return removed

    def restore(self) -> int:
        from moto.s3.models import s3_backends

        if not os.path.exists(self.state_path):
            return 0
        try:
            with open(self.state_path, "rb") as f:
                state = pickle.load(f)
            assert state.get("version") == STATE_VERSION, f"state version {state.get('version')}"
        except Exception as exc:  # another moto version, a truncated file...: keep it aside, start empty
            stamp = int(time.time())
            os.replace(self.state_path, f"{self.state_path}.broken-{stamp}")
            os.replace(self.blob_dir, f"{self.blob_dir}.broken-{stamp}")  # keep the bytes too: no GC on them
            os.makedirs(self.blob_dir)
            log.error("could not load %s (%r): it and blobs/ moved to *.broken-%d; starting with no buckets",
                      self.state_path, exc, stamp)
            return 0
        for (account_id, partition), attrs in state["backends"].items():
            backend = s3_backends[account_id][partition]
            for attr, value in attrs.items():
                setattr(backend, attr, value)
        s3_backends.bucket_accounts.update(state["bucket_accounts"])
        return sum(len(attrs.get("buckets", {})) for attrs in state["backends"].values())

    # --- background snapshots ------------------------------------------------------------------------------
    def snapshot_loop(self, interval: float, gc_interval: float) -> None:
        last_gc = time.monotonic()
        while True:
            with self.saved:
                while self.saved_generation >= self.generation:
                    self.saved.wait()
            time.sleep(max(interval, 4 * self.last_cost) if interval > 0 else 0)
            do_gc = time.monotonic() - last_gc > gc_interval
            try:
                self.save(gc=do_gc)
            except Exception:
                log.exception("snapshot failed; retrying")
                time.sleep(1)
                continue
            if do_gc:
                last_gc = time.monotonic()

    def mutated(self) -> int:
        """Caller holds self.lock, after a mutating request."""
        with self.saved:
            self.generation += 1
            self.saved.notify_all()
            return self.generation


class PersistingApp:
    def __init__(self, app, store: Store, sync: bool):
        self.app, self.store, self.sync = app, store, sync

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD", "GET") in ("GET", "HEAD", "OPTIONS"):
            return self.app(environ, start_response)
        # Read the body before taking the lock, so that parallel part uploads still arrive in parallel.
        length = environ.get("CONTENT_LENGTH")
        if length and length.isdigit():
            environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(int(length)))
        elif environ.get("wsgi.input_terminated"):
            environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read())
        captured = {}

        def capture(status, headers, exc_info=None):
            captured["args"] = (status, headers, exc_info)
            return lambda _data: None

        with self.store.lock:
            result = self.app(environ, capture)
            try:
                body = b"".join(result)
            finally:
                getattr(result, "close", lambda: None)()
            generation = self.store.mutated()
        if self.sync:  # group commit: wait for a snapshot that includes this request
            with self.store.saved:
                while self.store.saved_generation < generation:
                    self.store.saved.wait()
        status, headers, exc_info = captured["args"]
        start_response(status, headers, exc_info)
        return [body]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=int(os.environ.get("MOTO_PORT", 5000)))
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--credentials", required=True,
                        help="JSON file of access key id -> secret: the keys whose signed requests are answered")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between a write and its snapshot; 0 = before the write is answered")
    parser.add_argument("--fsync", action="store_true", help="fsync blobs and snapshots (power-cut safety)")
    parser.add_argument("--gc-interval", type=float, default=30.0, help="seconds between blob clean-ups")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [%(name)s] %(message)s")
    os.environ.setdefault("MOTO_PORT", str(args.port))

    keys = s3_guard.load_credentials(args.credentials)
    store = Store(args.data_dir, args.fsync)
    store.patch_moto()
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    t0 = time.monotonic()
    buckets = store.restore()
    store.save(gc=True, startup=True)
    log.info("restored %d bucket(s) from %s in %.2f s", buckets, args.data_dir, time.monotonic() - t0)

    app = s3_guard.GuardedApp(PersistingApp(DomainDispatcherApplication(create_backend_app), store,
                                            sync=args.interval <= 0), keys, args.port, log)
    server = make_server(args.host, args.port, app, threaded=True)
    threading.Thread(target=store.snapshot_loop, args=(max(args.interval, 0), args.gc_interval),
                     daemon=True, name="snapshots").start()

    def stop(signum, _frame):
        log.info("signal %d: final snapshot, then exit", signum)
        store.save(then_exit=True)  # takes the lock: waits for the mutating request in flight

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("moto S3 (persistent, %s) listening on http://%s:%d", args.data_dir, args.host, args.port)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
