"""Where an import's time goes: wall and CPU seconds per stage, in the importing process and in its workers.

Each stage is timed where it runs: :meth:`StageClock.stage` around a piece of work adds its wall time and the
CPU time of the thread that ran it (``time.thread_time``), so stages that overlap on several threads are each
charged their own share. Worker processes (parser processes, segment writers) time their stages the same way and
send the figures back with their answers (:meth:`StageClock.merge`, under a ``worker.`` prefix).

Stages timed in this process also keep when they first started and last ended, in seconds since the clock was made
(with the import): the first ``embed``'s start is how long the model waited for its first chunks (the pipeline's
fill), and what follows the last ``embed``'s end is its drain (the last segments' writing and commit).

What the figures say about scaling (Amdahl): the importing process's CPU per chunk (``serial_cpu``) bounds the
rate however many cores there are, since its threads share one interpreter lock; the workers' CPU per chunk
divided by the number of workers bounds it from the other side.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


class StageClock:
    """Seconds (wall and CPU) and calls per named stage; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._origin = time.perf_counter()
        self._wall: dict[str, float] = {}
        self._cpu: dict[str, float] = {}
        self._calls: dict[str, int] = {}
        self._span: dict[str, tuple[float, float]] = {}  # first start, last end (seconds since the origin)

    def add(self, name: str, wall: float, cpu: float, calls: int = 1, started: float | None = None) -> None:
        """Add ``wall`` and ``cpu`` seconds of ``calls`` calls; ``started`` (a ``perf_counter`` reading) also
        records when the stage ran."""
        with self._lock:
            self._wall[name] = self._wall.get(name, 0.0) + wall
            self._cpu[name] = self._cpu.get(name, 0.0) + cpu
            self._calls[name] = self._calls.get(name, 0) + calls
            if started is not None:
                start, end = started - self._origin, started - self._origin + wall
                first, last = self._span.get(name, (start, end))
                self._span[name] = (min(first, start), max(last, end))

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - wall, time.thread_time() - cpu, started=wall)

    def merge(self, figures: Mapping[str, tuple[float, float, int]] | None, prefix: str = "worker.") -> None:
        """Add a worker's ``{stage: (wall, cpu, calls)}``."""
        for name, (wall, cpu, calls) in (figures or {}).items():
            self.add(prefix + name, wall, cpu, calls)

    @property
    def origin(self) -> float:
        """The ``perf_counter`` reading the spans count from (the import's start)."""
        return self._origin

    def figures(self) -> dict[str, tuple[float, float, int]]:
        with self._lock:
            return {name: (self._wall[name], self._cpu[name], self._calls[name]) for name in self._wall}

    def span(self, name: str) -> tuple[float, float] | None:
        """When stage ``name`` first started and last ended, in seconds since the clock was made (None: not timed
        here)."""
        with self._lock:
            return self._span.get(name)

    def report(self, chunks: int = 0) -> dict[str, dict[str, float]]:
        """Per stage: wall and CPU seconds, calls and (with ``chunks``) CPU microseconds per chunk, the costliest
        first, and for stages timed here ``first_start_s`` and ``last_end_s``; plus ``importing_process`` and
        ``workers`` totals of CPU."""
        rows: dict[str, dict[str, float]] = {}
        serial = parallel = 0.0
        for name, (wall, cpu, calls) in sorted(self.figures().items(), key=lambda item: -item[1][1]):
            row = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "calls": calls}
            if chunks:
                row["cpu_us_per_chunk"] = round(cpu / chunks * 1e6, 1)
            span = self.span(name)
            if span is not None:
                row["first_start_s"], row["last_end_s"] = round(span[0], 3), round(span[1], 3)
            rows[name] = row
            if name.startswith("worker."):
                parallel += cpu
            else:
                serial += cpu
        totals = {"importing_process_cpu_s": round(serial, 3), "workers_cpu_s": round(parallel, 3)}
        if chunks:
            totals["importing_process_cpu_us_per_chunk"] = round(serial / chunks * 1e6, 1)
            totals["workers_cpu_us_per_chunk"] = round(parallel / chunks * 1e6, 1)
        rows["total"] = totals
        return rows
