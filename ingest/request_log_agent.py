"""The request log agent: follows each broker's kafka-request.log and publishes its records.

One agent can follow many brokers' files (one per broker on a host, or all of them in the
embedded mode). Each poll reads new complete lines of every file, parses them at the edge
(`ingest.request_log`: bodies dropped, stage timings and a topic summary kept), sends
records to the ``request_stages`` stream and malformed lines to ``quarantine`` with their
reason, flushes the sink, and only then saves the file positions (the loop is
ingest/tail_agent.py; a line the parser raises on is quarantined too, never retried
forever). Every record carries
``record_id = <cluster>:<broker>:<inode>:<byte offset>``, the same on a re-send after a
crash, so the silver job drops repeats and a restart neither loses nor duplicates rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ingest.file_tailer import Position, TailedLine
from ingest.request_log import SOURCE, parse_request_line
from ingest.tail_agent import QUARANTINE, TailAgent

STREAM = "request_stages"
__all__ = ["QUARANTINE", "STREAM", "RequestLogAgent", "RequestLogSource"]


@dataclass(frozen=True)
class RequestLogSource:
    cluster: str
    broker: int
    path: Path

    @property
    def name(self) -> str:
        return f"{self.cluster}/{self.broker}"


class RequestLogAgent(TailAgent[RequestLogSource]):
    """Tail, parse, publish, then remember where it got to."""

    STREAM = STREAM

    def _handle(self, src: RequestLogSource, lines: list[TailedLine],
                now_ms: int) -> Position | None:
        origin = str(src.path)
        for tl in lines:
            self._deliver(src.name, f"{src.cluster}:{src.broker}:{tl.inode}:{tl.start}",
                          partial(parse_request_line, tl.data, cluster=src.cluster,
                                  broker=src.broker),
                          source=SOURCE, raw=tl.data, cluster=src.cluster, now_ms=now_ms,
                          origin=origin, broker=src.broker)
        return lines[-1].after if lines else None
