"""The client log agent: follows client applications' log files for offset resets.

A source is one client log file: a Java consumer's log (Kafka's layout or any layout with
a ``yyyy-MM-dd HH:mm:ss,SSS`` stamp) or a librdkafka application's log (its stderr form
``%4|<epoch>|OFFSET|...`` or whatever the application's log callback writes). Each line
goes through `ingest.client_log.parse_client_line`:

- an offset reset, out-of-range fetch or truncation becomes a ``client_offset_events``
  record (schemas/client_offset_events.py);
- any other line is a `Skipped` (``not_offset_event``, most of a client log): counted in
  ``kmon_agent_skipped_records_total``, not published, not quarantined;
- a blank line is counted the same way (reason ``empty_line``): application logs hold
  them (banners, gaps between stack traces), and they say nothing;
- a line that cannot be trusted (not UTF-8, oversize, a stamp that is no date) goes to
  ``quarantine`` with its reason, and so does a line the parser raises on
  (``parser_exception``, see ingest/tail_agent.py).

What a line does not say, the source does: the client id, the group id (librdkafka lines
name neither) and the client software; a line without a time stamp gets the time the
agent read it. Positions and flushing are those of ingest/tail_agent.py.

``record_id = <cluster>:<client id or ->:<path>:<inode>:<byte offset>``.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from datetime import tzinfo
from pathlib import Path
from typing import Callable

from ingest.agent_metrics import AgentMetrics
from ingest.client_log import SOURCE, parse_client_line
from ingest.file_tailer import Position, PositionStore, TailedLine
from ingest.log_time import UTC
from ingest.sinks import Sink
from ingest.tail_agent import TailAgent

STREAM = "client_offset_events"


@dataclass(frozen=True)
class ClientLogSource:
    cluster: str
    client_id: str | None
    path: Path
    group_id: str | None = None
    client_software: str | None = None   # apache-kafka-java, librdkafka, ...

    @property
    def name(self) -> str:
        return f"{self.cluster}/{self.path}"


class ClientLogAgent(TailAgent[ClientLogSource]):
    """Tail client logs, publish their offset events, count the rest."""

    STREAM = STREAM
    SOURCE = SOURCE

    def __init__(self, sources: list[ClientLogSource], sink: Sink, positions: PositionStore,
                 metrics: AgentMetrics, clock: Callable[[], float] = time.time,
                 batch_lines: int = 20_000, start_at_end: bool = False, tz: tzinfo = UTC):
        super().__init__(sources, sink, positions, metrics, clock, batch_lines, start_at_end)
        self.tz = tz

    def _handle(self, src: ClientLogSource, lines: list[TailedLine],
                now_ms: int) -> Position | None:
        skipped: Counter[str] = Counter()
        origin = str(src.path)
        for tl in lines:
            if not tl.data.strip():
                skipped["empty_line"] += 1
                continue
            rid = f"{src.cluster}:{src.client_id or '-'}:{src.path}:{tl.inode}:{tl.start}"
            skip = self._deliver(
                src.name, rid,
                partial(parse_client_line, tl.data, cluster=src.cluster, client_id=src.client_id,
                        group_id=src.group_id, client_software=src.client_software,
                        ts_ms=now_ms, tz=self.tz),
                source=SOURCE, raw=tl.data, cluster=src.cluster, now_ms=now_ms, origin=origin)
            if skip is not None:
                skipped[skip.reason] += 1
        for reason, n in skipped.items():
            self.metrics.skipped.labels(self.metrics.agent, src.name, reason).inc(n)
        return lines[-1].after if lines else None
