"""The request log agent: follows each broker's kafka-request.log and publishes its records.

One agent can follow many brokers' files (one per broker on a host, or all of them in the
embedded mode). Each poll reads new complete lines of every file, parses them at the edge
(`ingest.request_log`: bodies dropped, stage timings and a topic summary kept), sends
records to the ``request_stages`` stream and malformed lines to ``quarantine`` with their
reason, flushes the sink, and only then saves the file positions. Every record carries
``record_id = <cluster>:<broker>:<inode>:<byte offset>``, the same on a re-send after a
crash, so the silver job drops repeats and a restart neither loses nor duplicates rows.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ingest.agent_metrics import AgentMetrics
from ingest.file_tailer import FileTailer, PositionStore
from ingest.malformed import Malformed
from ingest.request_log import parse_request_line
from ingest.sinks import Sink, SinkError

log = logging.getLogger(__name__)

STREAM = "request_stages"
QUARANTINE = "quarantine"


@dataclass(frozen=True)
class RequestLogSource:
    cluster: str
    broker: int
    path: Path

    @property
    def name(self) -> str:
        return f"{self.cluster}/{self.broker}"


class RequestLogAgent:
    """Tail, parse, publish, then remember where it got to."""

    def __init__(self, sources: list[RequestLogSource], sink: Sink, positions: PositionStore,
                 metrics: AgentMetrics, clock: Callable[[], float] = time.time,
                 batch_lines: int = 20_000, start_at_end: bool = False):
        self.sources = sources
        self.sink = sink
        self.positions = positions
        self.metrics = metrics
        self.clock = clock
        self.batch_lines = batch_lines
        saved = positions.load()
        self._tailers = {s.name: FileTailer(s.path, saved.get(s.name),
                                            start_at_end=start_at_end and s.name not in saved)
                         for s in sources}
        self._saved = dict(saved)

    def poll_once(self) -> int:
        """One pass over every source; returns how many lines it handled."""
        handled = 0
        pending = {}
        now_ms = int(self.clock() * 1000)
        for src in self.sources:
            tailer = self._tailers[src.name]
            lines = tailer.read_lines(self.batch_lines)
            for tl in lines:
                rid = f"{src.cluster}:{src.broker}:{tl.inode}:{tl.start}"
                rec = parse_request_line(tl.data, cluster=src.cluster, broker=src.broker)
                if isinstance(rec, Malformed):
                    q = rec.to_quarantine_record(cluster=src.cluster, ingest_ts_ms=now_ms,
                                                 broker=src.broker, origin=str(src.path))
                    q["record_id"] = rid
                    self.sink.send(QUARANTINE, src.name, q)
                    self.metrics.quarantined(STREAM)
                else:
                    rec["record_id"] = rid
                    self.sink.send(STREAM, src.name, rec)
                    self.metrics.published(STREAM)
            if lines:
                pending[src.name] = lines[-1].after
                handled += len(lines)
        if pending:
            try:
                self.sink.flush()
            except SinkError as e:
                self.metrics.flush_failures.labels(self.metrics.agent).inc()
                log.warning("request log agent: %s", e)
                self._rewind()
                return 0
            self._saved.update(pending)
            self.positions.save(self._saved)
            self.metrics.last_flush.labels(self.metrics.agent).set(self.clock())
        self._report_lag()
        return handled

    def _rewind(self) -> None:
        """After a failed flush, reread from the last saved positions next time."""
        for src in self.sources:
            self._tailers[src.name].close()
            self._tailers[src.name] = FileTailer(src.path, self._saved.get(src.name))

    def _report_lag(self) -> None:
        for src in self.sources:
            pos = self._saved.get(src.name)
            try:
                st = os.stat(src.path)
            except FileNotFoundError:
                continue
            lag = st.st_size - pos.offset if pos and pos.inode == st.st_ino else st.st_size
            self.metrics.lag_bytes.labels(self.metrics.agent, src.name).set(max(lag, 0))

    def run(self, stop: threading.Event, interval_s: float = 1.0) -> None:
        """Poll until `stop` is set; a final poll drains what is left."""
        while not stop.is_set():
            if self.poll_once() < self.batch_lines:
                stop.wait(interval_s)
        self.poll_once()

    def close(self) -> None:
        for t in self._tailers.values():
            t.close()
