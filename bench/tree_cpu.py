"""CPU seconds of a process and every descendant, sampled from /proc: getrusage misses the processes nobody waits for.

A job's Python workers (forked by PySpark's daemon, killed at exit) and Horovod's ranks are never reaped by the
process the bench waits for, so RUSAGE_CHILDREN leaves their CPU out. This sampler reads each descendant's own
user + system time every `interval` seconds and keeps each process's last reading: it misses at most one interval
of each process's CPU (processes that live shorter than that, and the end of the others).
"""
from __future__ import annotations

import threading

import psutil


class TreeCpu:
    """Start with the root pid; stop() returns the CPU seconds of the root and all its descendants seen."""

    def __init__(self, pid: int, interval: float = 0.25):
        self._root, self._interval = psutil.Process(pid), interval
        self._seen: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        try:
            processes = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return
        for process in processes:
            try:
                times = process.cpu_times()
                self._seen[(process.pid, process.create_time())] = times.user + times.system
            except psutil.Error:   # exited between listing and reading
                continue

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def stop(self) -> float:
        self._sample()
        self._stop.set()
        self._thread.join()
        return round(sum(self._seen.values()), 1)
