"""The `request_stages` record every request-log parse path produces, and what they share.

The record's columns in order (`RECORD_FIELDS`, those of schemas/request_stages.py), the
exception a path raises to stop with a `Malformed` reason (`BadLine`), and the facts the
JSON line (request_log_json, request_log_fast) and the text line (request_log_text) derive
the same way: the two addresses of a connection id, the unique topic names kept, the kind
of a Fetch, the error codes kept and an OffsetCommit's group, member and offsets.
"""

from __future__ import annotations

from schemas.plausible import INT32, INT64, PART_STAGES, STAGE_SLACK_MS, checker, in_range
from schemas.request_stages import BOUNDS, WIDTHS

MAX_TOPICS = 20
MAX_ERROR_CODES = 10
MAX_COMMITTED = 100  # OffsetCommit partitions kept per line

OFFSET_COMMIT = 8
NO_COMMIT = {"group_id": None, "member_id": None, "generation": None, "committed": None}

RECORD_FIELDS = (
    "cluster", "broker", "ts_ms", "api", "api_key", "api_version", "correlation_id",
    "client_id", "client_software_name", "client_software_version", "principal", "listener",
    "security_protocol", "local_addr", "remote_addr", "total_ms", "request_queue_ms",
    "local_ms", "remote_ms", "throttle_ms", "response_queue_ms", "send_ms", "fetch_kind",
    "fetch_replica_id", "acks", "topics", "topic_ids", "partition_count", "request_bytes",
    "response_bytes", "error_codes", "is_forwarded", "is_controller_traffic", "group_id",
    "member_id", "generation", "committed",
)


class BadLine(Exception):
    """Internal to the parsers: stop parsing with this Malformed reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def split_connection(conn: str) -> tuple[str, str]:
    """``localIp:localPort-remoteIp:remotePort-processor-index`` -> (local, remote).

    IPv6 addresses hold colons but never dashes, so dashes split safely. Up to 2.x the
    id had no trailing connection index: ``local-remote-processor``.
    """
    parts = conn.split("-")
    if len(parts) not in (3, 4) or ":" not in parts[0] or ":" not in parts[1]:
        raise BadLine("bad_connection")
    return parts[0], parts[1]


def first_unique(values, limit: int = MAX_TOPICS) -> list[str]:
    """The first `limit` distinct values, in their order."""
    return list(dict.fromkeys(values))[:limit]


_broken_bound = checker(*BOUNDS, *WIDTHS)


def implausible(rec: dict) -> str | None:
    """The first thing in a finished record that cannot be true, as a Malformed reason (the
    name of the request_stages check it would break: schemas/plausible.py), or None."""
    if rec["broker"] < 0:
        return "negative_broker"
    reason = _broken_bound(rec)
    if reason is not None:
        return reason
    for col in PART_STAGES:
        if rec[col] > rec["total_ms"] + STAGE_SLACK_MS:
            return f"stage_over_total:{col}"
    for c in rec["committed"] or ():
        if not in_range(c["partition"], *INT32):
            return "out_of_range:committed.partition"
        if not in_range(c["offset"], *INT64):
            return "out_of_range:committed.offset"
    return None


def fetch_kind_fields(replica_id: int | None) -> dict:
    # Consumers send replicaId -1 (or -2/-3 for special readers) up to v14 and no replica
    # state at all from v15; a follower (or a KRaft voter) sends its node id.
    if replica_id is not None and replica_id >= 0:
        return {"fetch_kind": "follower", "fetch_replica_id": replica_id}
    return {"fetch_kind": "consumer", "fetch_replica_id": None}


def kept_error_codes(codes) -> list[int]:
    """The distinct non-zero codes, lowest first, at most MAX_ERROR_CODES."""
    return sorted({c for c in codes if c != 0})[:MAX_ERROR_CODES]


def offset_commit_fields(api_key: int, request: dict | None, is_text) -> dict:
    """An OffsetCommit request's group, member, generation and committed offsets (nulls for
    every other API, and for a body that was not decoded).

    Who committed which offset: the offset-rewind detector tells an application's own
    seek (the same member committed the higher offsets before) from a stale process (a
    member of an older generation, or one that had not been committing the partition)
    with these. ``generationIdOrMemberEpoch`` since 3.x's KIP-848 rename
    (``generationId`` before); -1 with an empty member id is an admin or standalone
    commit. ``committed`` keeps the first MAX_COMMITTED partitions with an int index and
    offset, in request order; topic is null where the request names topics by id
    (v10+). `is_text` is the decoders' check for strings a sink can encode: a string
    that fails it is ``bad_escape:<key>``, as walk_topics does for topic names.
    """
    if api_key != OFFSET_COMMIT or request is None:
        return dict(NO_COMMIT)
    out = {}
    for key, col in (("groupId", "group_id"), ("memberId", "member_id")):
        v = request.get(key)
        if isinstance(v, str) and not is_text(v):
            raise BadLine(f"bad_escape:{key}")
        out[col] = v if isinstance(v, str) else None
    gen = request.get("generationIdOrMemberEpoch", request.get("generationId"))
    out["generation"] = gen if type(gen) is int else None
    committed: list[dict] = []
    topics = request.get("topics")
    for t in topics if isinstance(topics, list) else ():
        if not isinstance(t, dict):
            continue
        name = t.get("name")
        name = name if isinstance(name, str) and name and is_text(name) else None
        parts = t.get("partitions")
        for p in parts if isinstance(parts, list) else ():
            if not isinstance(p, dict):
                continue
            index, offset = p.get("partitionIndex"), p.get("committedOffset")
            if type(index) is int and type(offset) is int:
                committed.append({"topic": name, "partition": index, "offset": offset})
                if len(committed) == MAX_COMMITTED:
                    out["committed"] = committed
                    return out
    out["committed"] = committed
    return out
