"""The sockets a process tree listens on (TCP LISTEN, bound UDP), sampled while it runs: where a job can be reached."""
from __future__ import annotations

import ipaddress
import threading

import psutil


def _tree_names(root_pid: int) -> dict[int, str]:
    """pid -> the first words of its command line, for root_pid and its descendants now."""
    try:
        root = psutil.Process(root_pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    names = {}
    for process in processes:
        try:
            names[process.pid] = " ".join(process.cmdline()[:3])[:120]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return names


def _listeners(connections, names: dict[int, str]) -> set[tuple[str, int, str]]:
    found = set()
    for connection, pid in connections:
        tcp_listen = connection.status == psutil.CONN_LISTEN
        udp_bound = connection.type == 2 and connection.laddr and not connection.raddr   # SOCK_DGRAM
        if tcp_listen or udp_bound:
            found.add((connection.laddr.ip, connection.laddr.port, names[pid]))
    return found


def _each_process(names: dict[int, str]) -> list:
    connections = []
    for pid in names:
        try:
            connections += [(c, pid) for c in psutil.Process(pid).net_connections(kind="inet")]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return connections


def listening(root_pid: int) -> set[tuple[str, int, str]]:
    """(address, port, process) of every listening TCP or bound, unconnected UDP socket of root_pid and its
    descendants, now."""
    return _listening_in(_tree_names(root_pid))


def _listening_in(names: dict[int, str]) -> set[tuple[str, int, str]]:
    # One read of the system's socket tables per sample (per process, psutil re-reads them for each of the ~10
    # processes): a sample then takes milliseconds even on a loaded machine.
    try:
        connections = [(c, c.pid) for c in psutil.net_connections(kind="inet") if c.pid in names]
    except psutil.AccessDenied:   # not root: each process's own
        connections = _each_process(names)
    return _listeners(connections, names)


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    # Java binds IPv4 loopback as the IPv4-mapped ::ffff:127.0.0.1, which Python 3.11 does not call loopback.
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def reachable_from_outside(sockets) -> list[tuple[str, int, str]]:
    """The sockets bound to anything but a loopback address (0.0.0.0, :: and ::ffff:0.0.0.0 included)."""
    return sorted(s for s in sockets if not is_loopback(s[0]))


class ListenerSampler:
    """Samples listening(root_pid) every interval_s in a thread until stop(); `seen` holds the union.

    Processes whose command line contains one of `watch` are sampled every watch_interval_s by a second thread, so
    the whole tree's slower sample never leaves a gap in theirs. Gloo's listeners in the Horovod ranks live only
    while the ranks rendezvous (each pair listens until its peer has connected): a fraction of a second that even a
    5 ms sampler can miss on a loaded machine. Their connections last the whole training, so `connected` also
    keeps the watched processes' established TCP connections as (local address, remote address, process)."""

    def __init__(self, root_pid: int, interval_s: float = 0.2, watch: tuple[str, ...] = (),
                 watch_interval_s: float = 0.005):
        self.root_pid, self.interval_s, self.seen, self.connected, self.samples = root_pid, interval_s, set(), set(), 0
        self.watch, self.watch_interval_s = watch, watch_interval_s
        self._watched: dict[int, str] = {}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True)]
        if watch:
            self._threads.append(threading.Thread(target=self._run_watched, daemon=True))
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            names = _tree_names(self.root_pid)
            self._watched = {pid: name for pid, name in names.items() if any(word in name for word in self.watch)}
            self.seen |= _listening_in(names)
            self.samples += 1
            self._stop.wait(self.interval_s)

    def _run_watched(self) -> None:
        while not self._stop.is_set():
            watched = self._watched
            connections = _each_process(watched)
            self.seen |= _listeners(connections, watched)
            self.connected |= {(c.laddr.ip, c.raddr.ip, watched[pid]) for c, pid in connections
                               if c.status == psutil.CONN_ESTABLISHED and c.raddr}
            self.samples += 1
            self._stop.wait(self.watch_interval_s)

    def stop(self) -> set[tuple[str, int, str]]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        return self.seen
