"""The broker log shipper: follows each broker's own logs and publishes them as ``log_events``.

Per broker it follows server.log, controller.log, state-change.log and log-cleaner.log
(the file split of infra/resources/broker-log4j2.properties, which is Kafka's own; each
file rolls by size to ``<name>.1`` ... and `FileTailer` follows that). Lines are joined
into whole events by `ingest.broker_log.EventAssembler` (a stamped line and the lines
after it: the log cleaner's summary, stack traces, the config dump at start-up) and
parsed by `ingest.broker_log.parse_event`; records go to the ``log_events`` stream,
events that cannot be trusted to ``quarantine`` with their reason.

Positions. An event is complete only when the next stamped line arrives, so the event
being assembled has not been published yet: the position saved for a file is the start
of that event's first line (or the end of the last line when nothing is pending). A
restart, or a rewind after a failed flush, reads that event again from its first line, so
it is published exactly once, never lost. An event never spans two files (log4j rolls a
file between two events), so a line from the next file completes the pending one; so does
a line that does not follow the last one read, as after a file truncated in place (a lost
span, see ingest/tail_agent.py). An
event with no line after it (the last cleaner summary of a quiet broker) is published
once its file has been quiet for ``idle_flush_s`` (2 s); a continuation line that shows up
later than that becomes an ``orphan_lines`` quarantine record rather than vanish.

An event the parser raises on is quarantined whole (``parser_exception``, see
ingest/tail_agent.py) under its first line's record_id, exactly where a record or a
Malformed of it would have gone, so the positions above hold as they are; should the
assembler itself raise on a line, that line alone is quarantined, as a line that is not
UTF-8 is.

``record_id = <cluster>:<broker>:<log>:<inode>:<byte offset of the event's first line>``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import tzinfo
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

from ingest.agent_metrics import AgentMetrics
from ingest.broker_log import SOURCE, EventAssembler, parse_event
from ingest.file_tailer import Position, PositionStore, TailedLine
from ingest.log_time import UTC
from ingest.malformed import Malformed
from ingest.sinks import Sink
from ingest.tail_agent import TailAgent

STREAM = "log_events"
IDLE_FLUSH_S = 2.0

# The log name the records carry (schemas/log_events.py `log`) -> the file Kafka writes.
BROKER_LOGS = {
    "server": "server.log",
    "controller": "controller.log",
    "state-change": "state-change.log",
    "log-cleaner": "log-cleaner.log",
}


@dataclass(frozen=True)
class BrokerLogSource:
    cluster: str
    broker: int
    log: str          # server, controller, state-change, log-cleaner
    path: Path

    @property
    def name(self) -> str:
        return f"{self.cluster}/{self.broker}/{self.log}"

    @property
    def key(self) -> str:
        """The sink key: one broker's events stay ordered in one partition."""
        return f"{self.cluster}/{self.broker}"


def broker_log_sources(cluster: str, broker: int, log_dir: str | Path) -> list[BrokerLogSource]:
    """The four logs of one broker whose files are in `log_dir` (Kafka's ``kafka.logs.dir``)."""
    return [BrokerLogSource(cluster, broker, name, Path(log_dir) / file)
            for name, file in BROKER_LOGS.items()]


def _lazily(feed: Callable, line: bytes) -> Iterator:
    """``feed(line)``, called on the first next(): one try covers the call and its events."""
    yield from feed(line)


@dataclass
class _Assembly:
    """One file's event in the making."""
    assembler: EventAssembler = field(default_factory=EventAssembler)
    first: TailedLine | None = None     # first line of the pending event
    last_after: Position | None = None  # position after the last line read
    last_line_at: float = 0.0           # clock() when the last line was read


class BrokerLogAgent(TailAgent[BrokerLogSource]):
    """Tail, assemble events, publish whole ones, and save the start of the pending one."""

    STREAM = STREAM
    SOURCE = SOURCE

    def __init__(self, sources: list[BrokerLogSource], sink: Sink, positions: PositionStore,
                 metrics: AgentMetrics, clock: Callable[[], float] = time.time,
                 batch_lines: int = 20_000, start_at_end: bool = False,
                 idle_flush_s: float = IDLE_FLUSH_S, tz: tzinfo = UTC):
        self.idle_flush_s = idle_flush_s
        self.tz = tz
        self._assembly: dict[str, _Assembly] = {}
        super().__init__(sources, sink, positions, metrics, clock, batch_lines, start_at_end)
        for s in sources:
            self._forget(s)

    def _forget(self, src: BrokerLogSource) -> None:
        self._assembly[src.name] = _Assembly(last_line_at=self.clock())

    def _handle(self, src: BrokerLogSource, lines: list[TailedLine],
                now_ms: int) -> Position | None:
        st = self._assembly[src.name]
        for tl in lines:
            if st.first is not None and st.last_after != (tl.inode, tl.start):
                # The file rolled (its last event is whole), or the line comes after a gap.
                self._complete(src, st, now_ms)
            line_was_bad = self._feed(src, st, tl, now_ms)
            if st.first is None and not line_was_bad:
                st.first = tl
            st.last_after = tl.after
        if lines:
            st.last_line_at = self.clock()
        elif st.first is not None and self.clock() - st.last_line_at >= self.idle_flush_s:
            self._complete(src, st, now_ms)
        if st.first is not None:
            return Position(st.first.inode, st.first.start)
        return st.last_after

    def _feed(self, src: BrokerLogSource, st: _Assembly, tl: TailedLine, now_ms: int) -> bool:
        """Feed one line and emit the event its stamp completed; True when the line itself
        was quarantined (not UTF-8, or the assembler raised on it) and joined no event."""
        outs = _lazily(st.assembler.feed, tl.data)
        line_was_bad = False
        while True:
            try:
                out = next(outs, None)
            except Exception as e:  # noqa: BLE001 - no line may stop the agent
                self._quarantine_exception(src.key, e, tl.data, self._record_id(src, tl),
                                           source=SOURCE, cluster=src.cluster, now_ms=now_ms,
                                           origin=str(src.path), broker=src.broker)
                return True
            if out is None:
                return line_was_bad
            if isinstance(out, Malformed):  # this line alone (not UTF-8), not joined
                line_was_bad = True
                self._quarantine(src.key, out, self._record_id(src, tl), cluster=src.cluster,
                                 now_ms=now_ms, origin=str(src.path), broker=src.broker)
            else:                           # the event this line's stamp completed
                self._emit(src, out, st.first, now_ms)
                st.first = None

    def _complete(self, src: BrokerLogSource, st: _Assembly, now_ms: int) -> None:
        for event in st.assembler.flush():
            self._emit(src, event, st.first, now_ms)
        st.first = None

    def _emit(self, src: BrokerLogSource, event: str, first: TailedLine, now_ms: int) -> None:
        self._deliver(src.key, self._record_id(src, first),
                      partial(parse_event, event, cluster=src.cluster, broker=src.broker,
                              log=src.log, tz=self.tz),
                      source=SOURCE, raw=event, cluster=src.cluster, now_ms=now_ms,
                      origin=str(src.path), broker=src.broker)

    @staticmethod
    def _record_id(src: BrokerLogSource, line: TailedLine) -> str:
        return f"{src.cluster}:{src.broker}:{src.log}:{line.inode}:{line.start}"
