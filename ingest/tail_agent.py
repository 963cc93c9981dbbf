"""The loop every file-following agent shares: tail, publish, flush, and only then save.

An agent follows one file per source (a broker's request log, its server.log, a client's
log ...) with a `FileTailer` each. Every poll reads the new complete lines of every
source and hands them to the agent's `_handle`, which parses them, sends records and
quarantine records to the sink, and says from which position the source must be read
again after a restart. When anything was sent or a position moved, the sink is flushed,
and only after a successful flush are the positions saved. A failed flush (`SinkError`)
rewinds every tailer to the last saved positions and the agent forgets what it was
assembling, so the next poll sends the same records again, with the same ``record_id``s:
nothing is lost, and the repeats are dropped by the silver jobs.

A source's saved position is whatever `_handle` returns: the position after the last
line for agents that publish every line at once, or the start of an event still being
assembled for agents that join several lines into one record (ingest/broker_log_agent.py).

No input can stop an agent: `_deliver` parses one input and sends its record, and when
the parser (or building or serializing the record) raises instead of returning a record
or a `Malformed`, that input goes to quarantine with reason
``parser_exception:<type>: <message>`` (ingest/malformed.py), is counted in
``kmon_agent_parser_exceptions_total{source,exception}``, and the position moves past it
like past any other line. Without that, one such line would crash the agent, and every
restart would read the same line from the saved position and crash again.

No line can move the clock: a record stamped more than `MAX_AHEAD_MS` ahead of the host's
clock goes to quarantine as ``future_event_time`` (warned once per source), so one bad
line, or a broker clock that runs ahead, neither makes the lines after it late nor hides
the broker. Silver checks the same against its ingest time (jobs/silver.py). The one
judgement here that is not the line's alone: a line re-read after a restart is judged
against the clock again, so a line that was just past the bound and is no longer then
goes out both as quarantine and as a record.

No gap is silent. The losses the loop cannot prevent, a file that rolled past log4j's
last kept index while the agent was down (or while it was far behind) and a file truncated
in place, are reported by the tailer as a `Gap` (ingest/file_tailer.py) and the agent goes
on. Each gap becomes a quarantine row, reason ``lost_span:<cause>`` (rotated_away or
truncated), whose raw text says from which file and byte reading stopped and where it
resumed; it is counted in ``kmon_agent_dropped_records_total{reason=<cause>}`` and logged
once. The row goes through the same send, flush and save as the lines after it, and its
record_id names the source and the first byte lost, so a restart or a rewind before the
flush sends the same row again (silver drops the repeat) and a restart after a later
position was saved does not find the gap again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Generic, Protocol, TypeVar

from ingest.agent_metrics import AgentMetrics
from ingest.file_tailer import FileTailer, Gap, Position, PositionStore, TailedLine
from ingest.malformed import Malformed, Skipped, lost_span, parser_exception
from ingest.repeated_condition import RepeatedCondition
from ingest.sinks import Sink, SinkError
from schemas.quarantine import FUTURE_EVENT_TIME, MAX_EVENT_AHEAD_S

log = logging.getLogger(__name__)

QUARANTINE = "quarantine"


class FileSource(Protocol):
    """What the loop needs of a source: a unique name (the position key), its file and the
    cluster it belongs to (a source with a ``broker`` attribute names it in quarantine)."""

    @property
    def name(self) -> str: ...

    @property
    def cluster(self) -> str: ...

    @property
    def path(self): ...  # str or Path


S = TypeVar("S", bound=FileSource)


class TailAgent(Generic[S]):
    """Base of the file agents; subclasses set `STREAM` and implement `_handle`."""

    STREAM: str = ""
    # The source of the agent's own quarantine rows (lost spans): its parser's name.
    SOURCE: str = ""
    # A line stamped further ahead of the host's clock than this is quarantined
    # (`_ahead_of_clock`).
    MAX_AHEAD_MS: int = MAX_EVENT_AHEAD_S * 1000

    def __init__(self, sources: list[S], sink: Sink, positions: PositionStore,
                 metrics: AgentMetrics, clock: Callable[[], float] = time.time,
                 batch_lines: int = 20_000, start_at_end: bool = False):
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique (they key the saved positions): {names}")
        self.sources = sources
        self.sink = sink
        self.positions = positions
        self.metrics = metrics
        self.clock = clock
        self.batch_lines = batch_lines
        # A sink that cannot flush fails every poll while it lasts: logged at its start and
        # end, counted in the metrics every time.
        self._conditions = RepeatedCondition(log)
        saved = positions.load()
        self._saved: dict[str, Position] = dict(saved)
        # Head marks of the saved positions' files (ingest/file_tailer.py): a file that
        # took a saved file's inode is not read from the saved offset.
        self._saved_heads: dict[str, str] = positions.load_heads()
        # States saved beside the positions (`_state`), as of the last save.
        self._saved_states: dict[str, dict] = positions.load_states()
        self._tailers: dict[str, FileTailer] = {}
        # Where a source never saved starts: its beginning, or its end with start_at_end
        # (a rewind before the first save goes back there, not to the file's start).
        self._start: dict[str, Position | None] = {}
        for s in sources:
            tailer = self._new_tailer(s, saved.get(s.name),
                                      start_at_end=start_at_end and s.name not in saved,
                                      head=self._saved_heads.get(s.name))
            self._tailers[s.name] = tailer
            self._start[s.name] = None if s.name in saved else tailer.position
        self._sent = 0

    # ---- what a subclass implements --------------------------------------------------
    def _handle(self, src: S, lines: list[TailedLine], now_ms: int) -> Position | None:
        """Parse and send `lines` (maybe none); return where a restart must resume (None:
        no new position)."""
        raise NotImplementedError

    def _forget(self, src: S) -> None:
        """Drop any state built from lines read after the saved position (on a rewind);
        `_saved_states` holds the state saved with that position."""

    def _state(self, src: S) -> dict | None:
        """A JSON-able state to save beside the source's position after each flush (None:
        none). Called only once everything `_handle` sent has been flushed."""
        return None

    def finish(self) -> None:
        """At the end of `run`, after the last poll: emit what is still held (override)."""

    # ---- helpers for subclasses ------------------------------------------------------
    def _publish(self, key: str, record: dict, record_id: str) -> None:
        record["record_id"] = record_id
        self._send(self.STREAM, key, record)

    def _send(self, stream: str, key: str, record: dict) -> None:
        """Send a record that carries its record_id to `stream`, counted."""
        self.sink.send(stream, key, record)
        self.metrics.published(stream)
        self._sent += 1

    def _quarantine(self, key: str, bad: Malformed, record_id: str, *, cluster: str,
                    now_ms: int, origin: str, broker: int | None = None) -> None:
        q = bad.to_quarantine_record(cluster=cluster, ingest_ts_ms=now_ms, broker=broker,
                                     origin=origin)
        q["record_id"] = record_id
        self.sink.send(QUARANTINE, key, q)
        self.metrics.quarantined(self.STREAM)
        self._sent += 1

    def _quarantine_exception(self, key: str, error: Exception, raw: str | bytes,
                              record_id: str, *, source: str, cluster: str, now_ms: int,
                              origin: str, broker: int | None = None) -> None:
        """Quarantine the input whose parsing raised `error` (reason parser_exception)."""
        self.metrics.parser_exception(source, error)
        self._quarantine(key, parser_exception(source, error, raw), record_id, cluster=cluster,
                         now_ms=now_ms, origin=origin, broker=broker)

    def _deliver(self, key: str, record_id: str, parse: Callable[[], dict | Malformed | Skipped],
                 *, source: str, raw: str | bytes, cluster: str, now_ms: int, origin: str,
                 broker: int | None = None,
                 use: Callable[[dict], None] | None = None) -> Skipped | None:
        """Run `parse` for one input and publish its record (or hand it to `use`) or
        quarantine its Malformed.

        An exception from `parse`, or from sending the record it built (a value JSON cannot
        hold), quarantines the input instead (`raw`, which `source` could not parse). A
        `SinkError` is the sink's failure, not the input's, and propagates. Returns the
        Skipped, if that is what `parse` gave, for the caller to count.
        """
        try:
            rec = parse()
            if isinstance(rec, Skipped):
                return rec
            if not isinstance(rec, Malformed):
                rec = self._ahead_of_clock(rec, source, raw, key, now_ms)
            if not isinstance(rec, Malformed):
                if use is None:
                    self._publish(key, rec, record_id)
                else:
                    use(rec)
                return None
        except SinkError:
            raise
        except Exception as e:  # noqa: BLE001 - no input may stop the agent (module docstring)
            self._quarantine_exception(key, e, raw, record_id, source=source, cluster=cluster,
                                       now_ms=now_ms, origin=origin, broker=broker)
            return None
        self._quarantine(key, rec, record_id, cluster=cluster, now_ms=now_ms, origin=origin,
                         broker=broker)
        return None

    def _ahead_of_clock(self, rec: dict, source: str, raw: str | bytes, key: str,
                        now_ms: int) -> dict | Malformed:
        """The record, or a `Malformed` (future_event_time) when its event time is more than
        `MAX_AHEAD_MS` ahead of this host's clock. Such a line would move a window clock
        (ingest/request_windows.py) and make every honest line after it late; the agent
        reads the broker's files on the broker's host, so its clock is the broker's."""
        ts = rec.get("ts_ms")
        if type(ts) is not int or ts - now_ms <= self.MAX_AHEAD_MS:
            return rec
        self._conditions.occurred(
            ("ahead", key), "%s: %s has lines stamped ahead of this host's clock (%.0f s "
            "ahead); they go to quarantine as %s", self.metrics.agent, key,
            (ts - now_ms) / 1000, FUTURE_EVENT_TIME)
        return Malformed(source, FUTURE_EVENT_TIME, raw, ts)

    # ---- the loop ----------------------------------------------------------------------
    def poll_once(self) -> int:
        """One pass over every source; returns how many lines it handled."""
        handled = 0
        moved: dict[str, Position] = {}
        now_ms = int(self.clock() * 1000)
        for src in self.sources:
            lines = self._tailers[src.name].read_lines(self.batch_lines)
            resume = self._handle(src, lines, now_ms)
            if resume is not None and resume != self._saved.get(src.name):
                moved[src.name] = resume
            handled += len(lines)
        if moved or self._sent:
            try:
                self.sink.flush()
            except SinkError as e:
                self.metrics.flush_failures.labels(self.metrics.agent).inc()
                self._conditions.occurred("flush", "%s: %s", self.metrics.agent, e)
                self._rewind()
                self._report_lag()      # from the saved positions: it grows while this lasts
                return 0
            self._conditions.ended("flush")
            self._sent = 0
            self._save(moved)
            self.metrics.last_flush.labels(self.metrics.agent).set(self.clock())
        self._report_lag()
        return handled

    def _save(self, moved: dict[str, Position]) -> None:
        """Save the moved positions and any changed state (everything sent is flushed)."""
        placed = self._saved.keys() | moved.keys()
        states = {src.name: st for src in self.sources
                  if src.name in placed and (st := self._state(src)) is not None}
        if not moved and states == self._saved_states:
            return
        self._saved.update(moved)
        for name, pos in moved.items():
            mark = self._tailers[name].head_of(pos.inode)
            if mark is not None:
                self._saved_heads[name] = mark
            else:
                self._saved_heads.pop(name, None)
        self.positions.save(self._saved, states, self._saved_heads)
        self._saved_states = states

    def _rewind(self) -> None:
        """After a failed flush, reread from the last saved positions next time."""
        self._sent = 0
        for src in self.sources:
            self._tailers[src.name].close()
            self._tailers[src.name] = self._new_tailer(
                src, self._saved.get(src.name) or self._start[src.name],
                head=self._saved_heads.get(src.name))
            self._forget(src)

    def _new_tailer(self, src: S, position: Position | None, start_at_end: bool = False,
                    head: str | None = None) -> FileTailer:
        return FileTailer(src.path, position, start_at_end=start_at_end,
                          on_gap=lambda gap: self._lost_span(src, gap), head=head)

    def _lost_span(self, src: S, gap: Gap) -> None:
        """Quarantine a span the tailer skipped (module docstring), count and log it once.

        Called from inside `read_lines`, so the row is sent before the lines after the gap
        and flushed with them, before any position past the gap is saved."""
        lost_from, resumed_at = gap.to_json()
        record_id = (f"{self.STREAM}:{src.name}:lost_span:"
                     f"{gap.lost_from.inode}:{gap.lost_from.offset}")
        self.metrics.lost_span(record_id, gap.cause,
                               f"{src.name}: from {lost_from} to {resumed_at}")
        self._quarantine(src.name, lost_span(self.SOURCE, gap.cause, lost_from,
                                             resumed_at),
                         record_id, cluster=src.cluster, now_ms=int(self.clock() * 1000),
                         origin=str(src.path), broker=getattr(src, "broker", None))

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
        self.finish()

    def close(self) -> None:
        for t in self._tailers.values():
            t.close()
