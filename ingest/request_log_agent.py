"""The request log agent: follows each broker's kafka-request.log and publishes its records.

One agent can follow many brokers' files (one per broker on a host, or all of them in the
embedded mode). Each poll reads new complete lines of every file, parses them at the edge
(`ingest.request_log`: bodies dropped, stage timings and a topic summary kept), sends
records and malformed lines (to ``quarantine``, with their reason), flushes the sink, and
only then saves the file positions (the loop is ingest/tail_agent.py; a line the parser
raises on is quarantined too, never retried forever).

What goes out is windows (issue 24, fleet scale): each broker's lines go through a
`WindowAggregator` (ingest/request_windows.py), and the agent publishes what it emits: the
four window streams (request_windows, follower_fetch_windows, client_send_windows,
request_exemplars), each record under its own deterministic record_id. Some lines also go
out whole to ``request_stages``, with ``record_id = <cluster>:<broker>:<inode>:<byte
offset>`` (the same on a re-send, so the silver job drops repeats): the OffsetCommit lines
(`WHOLE_APIS`: they say who committed what, the offset-rewind detector's evidence, and they
are few), and every line of a broker in `WindowSettings.full_brokers` (root-cause work on
one broker; no detector reads those rows). The aggregator's checkpoint is saved beside the
position, which is its resume position (the earliest line of a window not emitted yet: a
restart re-reads from there, and the restored aggregator skips what emitted windows already
counted). At the end of `run` every open window is emitted (`flush_all`): its checkpoint is
saved before those records are sent and again after, as the aggregator requires.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ingest.file_tailer import Position, TailedLine
from ingest.request_log import SOURCE, parse_request_line
from ingest.request_windows import WindowAggregator
from ingest.sinks import SinkError
from ingest.tail_agent import QUARANTINE, TailAgent

log = logging.getLogger(__name__)

STREAM = "request_stages"
# Request lines that go out whole besides their windows, from every broker.
WHOLE_APIS = frozenset({"OffsetCommit", "TxnOffsetCommit"})
__all__ = ["QUARANTINE", "STREAM", "RequestLogAgent", "RequestLogSource", "WindowSettings"]


@dataclass(frozen=True)
class RequestLogSource:
    cluster: str
    broker: int
    path: Path

    @property
    def name(self) -> str:
        return f"{self.cluster}/{self.broker}"


@dataclass(frozen=True)
class WindowSettings:
    """The aggregator's keyword arguments (none: its defaults), and the brokers whose
    requests go out one record each too (besides their windows, which the detectors
    read for every broker)."""
    options: dict = field(default_factory=dict)
    full_brokers: frozenset[int] = frozenset()

    def aggregator(self, src: RequestLogSource, state: dict | None) -> WindowAggregator:
        return WindowAggregator(src.cluster, src.broker, state=state, **self.options)


class RequestLogAgent(TailAgent[RequestLogSource]):
    """Tail, parse, publish windows (and some requests whole), then remember where it got
    to."""

    STREAM = STREAM
    SOURCE = SOURCE

    def __init__(self, *args, windows: WindowSettings, **kw):
        super().__init__(*args, **kw)
        self.windows = windows
        self._after: dict[str, Position] = {}    # after the last line read, per source
        self._aggs: dict[str, WindowAggregator] = {
            src.name: windows.aggregator(src, self._saved_states.get(src.name))
            for src in self.sources}

    def _handle(self, src: RequestLogSource, lines: list[TailedLine],
                now_ms: int) -> Position | None:
        origin = str(src.path)
        agg = self._aggs[src.name]
        whole = src.broker in self.windows.full_brokers
        for tl in lines:
            record_id = f"{src.cluster}:{src.broker}:{tl.inode}:{tl.start}"
            use = partial(self._aggregate, agg, src.name, record_id, (tl.inode, tl.start),
                          whole)
            self._deliver(src.name, record_id,
                          partial(parse_request_line, tl.data, cluster=src.cluster,
                                  broker=src.broker),
                          source=SOURCE, raw=tl.data, cluster=src.cluster, now_ms=now_ms,
                          origin=origin, broker=src.broker, use=use)
        if lines:
            self._after[src.name] = lines[-1].after
        self._send_windows(src, agg.ready(), now_ms)
        return self._resume(src.name, agg)

    def _aggregate(self, agg: WindowAggregator, key: str, record_id: str,
                   position: tuple[int, int], whole: bool, rec: dict) -> None:
        agg.add(rec, position)
        if whole or rec["api"] in WHOLE_APIS:   # a copy: the aggregator may keep rec
            self._publish(key, dict(rec), record_id)

    def _send_windows(self, src: RequestLogSource, outs: list, now_ms: int | None = None
                      ) -> None:
        """Send the aggregator's records (each carries its record_id). One that no sink can
        encode (an exemplar kept whole with a value JSON cannot hold: only a parser bug
        makes one) goes to quarantine instead, so it cannot stop the agent on every
        restart; a SinkError is the sink's failure and propagates."""
        for out in outs:
            try:
                self._send(out.stream, src.name, out.record)
            except SinkError:
                raise
            except Exception as e:  # noqa: BLE001 - no input may stop the agent
                self._quarantine_exception(
                    src.name, e, repr(out.record)[:2000], out.record["record_id"],
                    source=SOURCE, cluster=src.cluster,
                    now_ms=now_ms if now_ms is not None else int(time.time() * 1000),
                    origin=str(src.path), broker=src.broker)

    def _resume(self, name: str, agg: WindowAggregator) -> Position | None:
        """Where a restart must re-read from: the earliest line the aggregator still
        holds, else after the last line read."""
        held = agg.resume_position()
        return Position(*held) if held is not None else self._after.get(name)

    def _resumes(self) -> dict[str, Position]:
        return {src.name: pos for src in self.sources
                if (pos := self._resume(src.name, self._aggs[src.name])) is not None}

    def _state(self, src: RequestLogSource) -> dict | None:
        return self._aggs[src.name].checkpoint()

    def _forget(self, src: RequestLogSource) -> None:
        self._aggs[src.name] = self.windows.aggregator(src, self._saved_states.get(src.name))
        self._after.pop(src.name, None)

    def finish(self) -> None:
        """Emit every open window (shutdown): the checkpoint first, then the records, then
        the checkpoint again (ingest/request_windows.py says why)."""
        outs = {name: agg.flush_all() for name, agg in self._aggs.items()}
        if not any(outs.values()):
            return
        self._save(self._resumes())
        by_name = {src.name: src for src in self.sources}
        for name, records in outs.items():
            self._send_windows(by_name[name], records)
        try:
            self.sink.flush()
        except SinkError as e:
            # Saved before sending: the next start rebuilds and sends the same records.
            log.warning("%s: the last windows were not flushed (%s); the next start sends "
                        "them again", self.metrics.agent, e)
            return
        self._sent = 0
        self._save(self._resumes())
