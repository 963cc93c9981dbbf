"""Where agents publish telemetry records: a monitoring Kafka, or (embedded) a landing folder.

Both take flat JSON records for a named stream (request_stages, log_events, ...,
quarantine) and share one contract: `send` buffers, `flush` makes every buffered record
durable or raises `SinkError` saying how many were not, and only after a successful flush
does an agent save its source position. A crash between the two repeats records; every
record carries a deterministic ``record_id`` so the silver jobs drop the repeats.

- `KafkaSink`: an idempotent confluent-kafka producer (acks=all) writing stream S to topic
  ``<topic_prefix>S``, keyed by cluster and broker (or group) so one source stays ordered
  in one partition. Its buffer is bounded (``queue.buffering.max.*``); when the monitoring
  Kafka is down the producer retries until ``delivery.timeout.ms``; `flush` then reports
  the records it could not deliver and the agent keeps its position, so nothing is
  dropped as long as the source still has the data (a log file that rotated away while
  Kafka was down is the exception, and the agent counts and logs that). A record Kafka
  acknowledged in a flush that failed as a whole is not written again when the agent
  sends everything again.
- `LandingSink`: appends each stream's records to a new JSON-lines file per flush under
  ``<root>/<stream>/``, written under a dot-name, fsynced and renamed, so Spark's file
  source sees whole files only; the renames come after every file is written, so a flush
  that fails leaves nothing.

Both encode a record in `send`, so a record that cannot be sent (a value JSON cannot hold,
text that is not valid Unicode) fails there, where the agent quarantines its input, and
never in `flush`, where it would fail the whole batch again on every retry.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)


class SinkError(RuntimeError):
    """Some records could not be made durable; the message says how many and why."""


class Sink(Protocol):
    def send(self, stream: str, key: str, record: dict) -> None: ...
    def flush(self, timeout: float = 30.0) -> None: ...
    def close(self) -> None: ...


def _dumps(record: dict) -> str:
    """A record as compact JSON, its ``record_id`` first: silver reads the id from the
    head of the line instead of parsing the whole value once more (jobs/silver.py
    `dedupe_key`)."""
    if "record_id" in record and next(iter(record)) != "record_id":
        record = {"record_id": record["record_id"], **record}
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class LandingSink:
    """JSON-lines files in a landing folder (embedded mode)."""

    def __init__(self, root: str | Path, agent_id: str):
        self.root = Path(root)
        self.agent_id = agent_id
        self._buffers: dict[str, list[bytes]] = {}
        self._seq = 0
        self._lock = threading.Lock()

    def send(self, stream: str, key: str, record: dict) -> None:
        line = _dumps(record).encode("utf-8")
        with self._lock:
            self._buffers.setdefault(stream, []).append(line)

    def flush(self, timeout: float = 30.0) -> None:
        """All or nothing: every stream's file is written and fsynced under its dot-name
        first, and only then are they renamed. A flush that fails (the disk full) leaves
        no file behind, so its records come only once, when the agent sends them again;
        otherwise a later retry would repeat the streams written before the failure,
        maybe longer after than silver remembers record ids."""
        with self._lock:
            buffers, self._buffers = self._buffers, {}
        written: list[tuple[Path, Path]] = []
        try:
            for stream, lines in buffers.items():
                if not lines:
                    continue
                d = self.root / stream
                d.mkdir(parents=True, exist_ok=True)
                self._seq += 1
                name = f"{self.agent_id}-{time.time_ns()}-{self._seq:06d}.jsonl"
                tmp = d / f".{name}.tmp"
                written.append((tmp, d / name))
                with open(tmp, "wb") as f:
                    f.write(b"\n".join(lines))
                    f.write(b"\n")
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:
            for tmp, _ in written:
                tmp.unlink(missing_ok=True)
            n = sum(len(lines) for lines in buffers.values())
            raise SinkError(f"could not write {n} records to {self.root}: {e}") from e
        try:
            for tmp, final in written:
                os.replace(tmp, final)
        except OSError as e:
            raise SinkError(f"could not rename a landing file under {self.root}: {e}") from e

    def close(self) -> None:
        self.flush()


class KafkaSink:
    """An idempotent producer to the monitoring Kafka."""

    def __init__(self, producer_config: dict, topic_prefix: str = "kmon.",
                 buffer_messages: int = 200_000, buffer_kbytes: int = 256 * 1024):
        from confluent_kafka import Producer

        conf = {
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": "lz4",
            "linger.ms": 50,
            "queue.buffering.max.messages": buffer_messages,
            "queue.buffering.max.kbytes": buffer_kbytes,
            "delivery.timeout.ms": 120_000,
            **producer_config,
        }
        self.topic_prefix = topic_prefix
        self._producer = Producer(conf)
        self._failed = 0
        self._last_error: str | None = None
        # Record ids the monitoring Kafka acknowledged since the last flush that succeeded.
        # A flush fails as a whole when any record fails, and the agent then sends all of
        # them again; these are not written twice (silver drops repeats only within its
        # dedupe window, which a long outage outlasts). Bounded by what one agent sends
        # between two good flushes.
        self._acked: set[str] = set()

    def _on_delivery(self, record_id: str | None, err, msg) -> None:
        if err is not None:
            self._failed += 1
            self._last_error = str(err)
        elif record_id is not None:
            self._acked.add(record_id)

    def send(self, stream: str, key: str, record: dict) -> None:
        record_id = record.get("record_id")
        if record_id is not None and record_id in self._acked:
            return                         # written before a flush that failed
        value = _dumps(record).encode()
        deadline = time.monotonic() + 30
        on_delivery = functools.partial(self._on_delivery, record_id)
        while True:
            try:
                self._producer.produce(self.topic_prefix + stream, value=value, key=key.encode(),
                                       on_delivery=on_delivery)
                break
            except BufferError:
                # Bounded buffer full (monitoring Kafka slow or down): wait for room.
                if time.monotonic() > deadline:
                    raise SinkError(
                        f"producer buffer full for 30 s (monitoring Kafka unreachable?); "
                        f"{stream} record not accepted, source position not advanced") from None
                self._producer.poll(0.1)
        self._producer.poll(0)

    def flush(self, timeout: float = 30.0) -> None:
        remaining = self._producer.flush(timeout)
        failed, self._failed = self._failed, 0
        if remaining or failed:
            raise SinkError(f"{remaining} records still queued and {failed} failed "
                            f"(last error: {self._last_error}); source position not advanced")
        self._acked.clear()

    def close(self) -> None:
        self.flush()


def new_agent_id(kind: str) -> str:
    return f"{kind}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
