"""The text request-log message of Kafka up to 2.7 (RequestChannel's StringBuilder line).

    Completed request:RequestHeader(apiKey=LIST_OFFSETS, apiVersion=5, clientId=c,
    correlationId=8799) -- {replicaId=-1,...},response:{...} from connection
    127.0.0.1:62610-127.0.0.1:62622-3;totalTime:0.085,requestQueueTime:0.013,...

The header is read by one anchored regex; the connection and the stage times follow the
last `` from connection ``; the request and response descriptions between them are only
searched for the body facts kept (acks, topics, partition count, replica id, error codes).
The line carries no topic ids and no byte counts.
"""

from __future__ import annotations

import math
import re

from ingest.kafka_api import API_KEYS_BY_UPPER, FETCH, PRODUCE, ApiMismatch, canonical_api
from ingest.request_log_record import (NO_COMMIT, BadLine, fetch_kind_fields, first_unique,
                                      kept_error_codes, split_connection)

# The stages in the pre-2.8 text line -> record column.
LEGACY_TIMINGS = (
    ("totalTime", "total_ms"),
    ("requestQueueTime", "request_queue_ms"),
    ("localTime", "local_ms"),
    ("remoteTime", "remote_ms"),
    ("throttleTime", "throttle_ms"),
    ("responseQueueTime", "response_queue_ms"),
    ("sendTime", "send_ms"),
)

LOGGER_SUFFIX_RE = re.compile(r" \([A-Za-z_$][\w$.-]*\)$")
LEGACY_HEADER_RE = re.compile(
    r"RequestHeader\(apiKey=([A-Z_]+), (?:apiVersion=(-?\d+), )?clientId=(.*?), "
    r"correlationId=(-?\d+)(?:, headerVersion=\d+)?\) -- ")
FROM_CONNECTION = " from connection "
LEGACY_NUMBER = r"(-?\d+(?:\.\d+)?(?:E-?\d+)?)"
LEGACY_TIMING_RES = tuple(
    (key, col, re.compile(r"[;,]" + key + ":" + LEGACY_NUMBER + r"(?=,|$)"))
    for key, col in LEGACY_TIMINGS)
LEGACY_PROTOCOL_RE = re.compile(r",securityProtocol:([A-Za-z_]+)")
LEGACY_PRINCIPAL_RE = re.compile(r",principal:(.*?),listener:([^,]*)")
LEGACY_CLIENT_RE = re.compile(r"ClientInformation\(softwareName=([^,]*), softwareVersion=([^)]*)\)")
LEGACY_RESPONSE_RE = re.compile(r",response[:=]")
LEGACY_ACKS_RE = re.compile(r"\backs=(-?\d+)")
LEGACY_NUM_PARTITIONS_RE = re.compile(r"\bnumPartitions=(\d+)")
LEGACY_REPLICA_RE = re.compile(r"\breplica_?[iI]d=(-?\d+)")
LEGACY_TOPIC_RE = re.compile(r"\{(?:name|topic)=([^,{}\[\]=]+),partitions=")
LEGACY_PARTITION_RE = re.compile(r"[{,]partition(?:Index|_index)?=-?\d")
LEGACY_ERROR_RE = re.compile(r"\berror_?[cC]ode=(-?\d+)")


def parse_legacy_message(message: str) -> dict:
    """The record from a pre-2.8 text message (RequestChannel's StringBuilder line).

    BadLine for a line out of shape; ValueError for a number of more digits than Python
    converts (the caller names it oversize_number).
    """
    suffix = LOGGER_SUFFIX_RE.search(message)
    if suffix is not None:
        message = message[:suffix.start()]
    head = LEGACY_HEADER_RE.match(message)
    if head is None:
        raise BadLine("missing_field:RequestHeader")
    api = _legacy_api(head.group(1))
    desc, connection, tail = _legacy_sections(message, head.end())
    local, remote = split_connection(connection)
    rec = {
        "api": api[1], "api_key": api[0],
        "api_version": int(head.group(2)) if head.group(2) is not None else None,
        "correlation_id": int(head.group(4)),
        "client_id": head.group(3),
        "is_forwarded": None,
        "local_addr": local, "remote_addr": remote,
    }
    rec.update(_legacy_timings(tail))
    rec.update(_legacy_client_fields(tail))
    rec.update(_legacy_body_facts(api[0], desc))
    return rec


def _legacy_api(key_name: str) -> tuple[int, str]:
    """(api key, JMX name) of the header's apiKey name; unknown_api or api_mismatch."""
    api_key = API_KEYS_BY_UPPER.get(key_name)
    try:
        api = canonical_api(api_key, key_name)
    except ApiMismatch:
        raise BadLine("api_mismatch") from None
    if api is None:
        raise BadLine("unknown_api")
    return api


def _legacy_sections(message: str, head_end: int) -> tuple[str, str, str]:
    """(request and response description, connection id, stage times and the rest)."""
    conn_at = message.rfind(FROM_CONNECTION)
    if conn_at < 0:
        raise BadLine("truncated_line")
    desc = message[head_end:conn_at]
    tail = message[conn_at + len(FROM_CONNECTION):]
    semi = tail.find(";")
    if semi < 0:
        raise BadLine("truncated_line")
    return desc, tail[:semi], tail


def _legacy_timings(tail: str) -> dict:
    """Every stage time: missing_field, negative_time or wrong_type (infinite) if not."""
    rec = {}
    for key, col, rx in LEGACY_TIMING_RES:
        m = rx.search(tail)
        if m is None:
            raise BadLine(f"missing_field:{key}")
        v = float(m.group(1))
        if v < 0:
            raise BadLine(f"negative_time:{key}")
        if v == math.inf:
            raise BadLine(f"wrong_type:{key}")
        rec[col] = v
    return rec


def _legacy_client_fields(tail: str) -> dict:
    """Security protocol, principal, listener and client software; None where absent."""
    proto = LEGACY_PROTOCOL_RE.search(tail)
    who = LEGACY_PRINCIPAL_RE.search(tail)
    client = LEGACY_CLIENT_RE.search(tail)
    return {
        "security_protocol": proto.group(1) if proto else None,
        "principal": who.group(1) if who else None,
        "listener": who.group(2) if who else None,
        "client_software_name": client.group(1) if client else None,
        "client_software_version": client.group(2) if client else None,
    }


def _legacy_body_facts(api_key: int, desc: str) -> dict:
    """Acks, topics, partition count and fetch kind of the request; the response's errors."""
    resp = LEGACY_RESPONSE_RE.search(desc)
    request_desc = desc[:resp.start()] if resp else desc
    response_desc = desc[resp.end():] if resp else ""
    acks = LEGACY_ACKS_RE.search(request_desc) if api_key == PRODUCE else None
    num = LEGACY_NUM_PARTITIONS_RE.search(request_desc)
    rec = {
        "acks": int(acks.group(1)) if acks else None,
        "topics": first_unique(LEGACY_TOPIC_RE.findall(request_desc)),
        "topic_ids": [],
        "partition_count": (int(num.group(1)) if num
                            else len(LEGACY_PARTITION_RE.findall(request_desc)) or None),
        "request_bytes": None,
        "response_bytes": None,
        # The text line's OffsetCommit body is a Scala toString kmon does not read: who
        # committed what is left null (the offset-rewind detector then says member_commit).
        **NO_COMMIT,
    }
    if api_key == FETCH:
        replica = LEGACY_REPLICA_RE.search(request_desc)
        rec.update(fetch_kind_fields(int(replica.group(1)) if replica else None))
    else:
        rec.update(fetch_kind=None, fetch_replica_id=None)
    rec["error_codes"] = kept_error_codes(int(c) for c in LEGACY_ERROR_RE.findall(response_desc))
    return rec
