"""A fault-injecting TCP proxy for tests (like toxiproxy): forwards bytes to a server, and can take it 'down'.

While down, the proxy resets every open connection and closes its listening socket, so clients see
'connection reset' on pooled connections and 'connection refused' on new ones, as when an S3 endpoint is
unreachable. `arm(seconds)` starts such an outage at the first connection made after arming.
"""
from __future__ import annotations

import socket
import struct
import threading
import time


def _reset(sock: socket.socket) -> None:
    """Close with an RST instead of a FIN (SO_LINGER 0), as a crashed or unreachable peer looks."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)      # wakes a thread blocked in recv on it; close() alone would not
    except OSError:
        pass
    sock.close()


class FaultProxy:
    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._armed_s: float | None = None
        self._stopped = False
        self.connections = 0        # connections forwarded
        self.resets = 0             # connections reset by an outage
        self.outages: list[tuple[float, float]] = []   # (start, end) monotonic times
        self._listener = self._listen(0)
        self.port = self._listener.getsockname()[1]
        self._serve()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm(self, down_for_s: float) -> None:
        """The next connection starts an outage of down_for_s seconds (that connection is reset too)."""
        with self._lock:
            self._armed_s = down_for_s

    def refused_for_s(self) -> float:
        """Total seconds the proxy has been down so far."""
        now = time.monotonic()
        return sum(min(end, now) - start for start, end in self.outages)

    def close(self) -> None:
        self._stopped = True
        with self._lock:
            self._listener.close()
            for sock in list(self._open):
                _reset(sock)

    # --- internals ----------------------------------------------------------------------------------------------

    def _listen(self, port: int) -> socket.socket:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        return listener

    def _serve(self) -> None:
        threading.Thread(target=self._accept_loop, args=(self._listener,), daemon=True).start()

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stopped:
            try:
                client, _addr = listener.accept()
            except OSError:
                return                         # listener closed: an outage began, or the proxy stopped
            with self._lock:
                down_for = self._armed_s
                self._armed_s = None
            if down_for is not None:
                _reset(client)
                self._go_down(down_for)
                return
            self._forward(client)

    def _go_down(self, seconds: float) -> None:
        start = time.monotonic()
        with self._lock:
            self.outages.append((start, start + seconds))
            self._listener.close()
            for sock in list(self._open):
                _reset(sock)
                self.resets += 1
            self._open.clear()
        timer = threading.Timer(seconds, self._come_back)
        timer.daemon = True
        timer.start()

    def _come_back(self) -> None:
        if self._stopped:
            return
        with self._lock:
            self._listener = self._listen(self.port)
        self._serve()

    def _forward(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=10)
            upstream.settimeout(None)
        except OSError:
            _reset(client)
            return
        with self._lock:
            self.connections += 1
            self._open.update((client, upstream))
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with self._lock:
                    self._open.discard(sock)
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
