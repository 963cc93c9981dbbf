"""The few bytes of Kafka's wire protocol a slow reader needs: one Fetch request (v4) and
the parts of its response that say where to fetch next.

Why by hand: every Kafka client worth using reads its sockets as fast as it can
(librdkafka in background threads), so an application cannot make the broker wait on it.
A reader that owns its socket can: it reads each response as slowly as it likes, and the
broker's ResponseSend waits on it. Fetch v4 is the oldest version Kafka 4 still accepts
(KIP-896) and the simplest: topic names, no sessions, no tagged fields.

Request: header v1 (api key 1, version 4, correlation id, client id) and the body
replica_id=-1 (a consumer), max_wait_ms, min_bytes, max_bytes, isolation_level,
[topic [partition, fetch_offset, partition_max_bytes]].

Response v4: correlation id, throttle_time_ms, [topic [partition, error_code,
high_watermark, last_stable_offset, [aborted txns], records]]. Records are record batches
(magic 2): base_offset int64, batch_length int32, then 4 + 1 + 4 + 2 bytes before
last_offset_delta int32. The last batch may be cut short (the broker stops at the byte
limit); only whole batches count.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

FETCH_API_KEY = 1
FETCH_VERSION = 4


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def fetch_request(correlation_id: int, client_id: str, topic: str, partition: int,
                  offset: int, *, max_wait_ms: int = 100, min_bytes: int = 1,
                  max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20) -> bytes:
    """One size-prefixed Fetch v4 request for one partition from `offset`."""
    header = struct.pack(">hhi", FETCH_API_KEY, FETCH_VERSION, correlation_id) + _string(client_id)
    body = (struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 0)
            + struct.pack(">i", 1) + _string(topic)
            + struct.pack(">iiqi", 1, partition, offset, partition_max_bytes))
    msg = header + body
    return struct.pack(">i", len(msg)) + msg


@dataclass(frozen=True)
class FetchedPartition:
    correlation_id: int
    error_code: int
    high_watermark: int
    records_bytes: int
    next_offset: int | None    # after the last whole batch; None: no whole batch


def next_offset(records: bytes) -> int | None:
    """The offset after the last whole record batch in `records`, None if there is none."""
    pos, nxt = 0, None
    while pos + 27 <= len(records):
        base, length = struct.unpack_from(">qi", records, pos)
        if length <= 0 or pos + 12 + length > len(records):
            break
        (last_delta,) = struct.unpack_from(">i", records, pos + 23)
        nxt = base + last_delta + 1
        pos += 12 + length
    return nxt


def parse_fetch_response(body: bytes) -> FetchedPartition:
    """The first partition of a Fetch v4 response body (after the size prefix)."""
    pos = 0

    def take(fmt: str):
        nonlocal pos
        vals = struct.unpack_from(fmt, body, pos)
        pos += struct.calcsize(fmt)
        return vals

    corr, _throttle, topics = take(">iii")
    if topics < 1:
        raise ValueError("fetch response without topics")
    (name_len,) = take(">h")
    pos += name_len
    (partitions,) = take(">i")
    if partitions < 1:
        raise ValueError("fetch response without partitions")
    _p, error, hw, _lso, aborted = take(">ihqqi")
    pos += max(aborted, 0) * 16
    (size,) = take(">i")
    records = body[pos:pos + max(size, 0)]
    return FetchedPartition(corr, error, hw, max(size, 0), next_offset(records))
