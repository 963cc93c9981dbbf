"""The fast path for a JSON request-log message (Kafka 2.8+): the envelope decoded, the
bodies only searched.

Speed matters: the request-log agent runs on the broker's host, a busy broker writes
5,000-50,000 lines a second, and a Fetch or Metadata line can be tens of KB, most of it
the response body we drop. So this path decodes the envelope (header, timings,
connection, principal, listener, client software) with msgspec into typed structs whose
``request`` and ``response`` stay raw text (`msgspec.Raw`: validated JSON, not decoded),
and the few body facts kept (topics, partition count, bytes, acks, replica id, error
codes) are searched for in that text. Other APIs decode only their (small) request body
(an OffsetCommit's group, member and offsets come from it, as on the full decode).

Why msgspec (pinned in pyproject.toml): a C decoder that validates the whole document but
builds objects only for the fields a struct declares, skipping the rest, and type-checks
them (an int is not a bool, a float is finite and in range). On the recorded log of
bench/bench_edge_aggregation.py it decodes the envelope in about 2.7 us against about
10 us for the anchored regexes and conversions it replaces, and 24 us for orjson's full
decode (every body object built). Python's json module stays for the full decode, whose
errors name what is wrong.

Whenever this path meets something it does not take (a line with a backslash anywhere:
an escape, which only the full decode reads and checks; a document msgspec rejects; a
field of another type, a negative time, an unknown API, an odd connection) it returns
None and the line goes to `request_log_json.parse_json_message`, which decodes everything
and says what is wrong; tests check that both give the same record on every captured
line and on fuzzed ones. The price: a Produce or Fetch body is searched, not walked, so a
fact of another shape than Kafka writes goes unnoticed there (tests/unit/test_parser_fuzz.py
lists those columns).
"""

from __future__ import annotations

import json
import math
import re

import msgspec

from ingest.kafka_api import API_NAMES, FETCH, PRODUCE, upper_snake
from ingest.request_log_json import ZERO_TOPIC_ID, is_text, json_object_text, walk_topics
from ingest.request_log_record import (NO_COMMIT, BadLine, first_unique, kept_error_codes,
                                       offset_commit_fields, split_connection)

# Request bodies of the APIs without a regex path are decoded only up to this size.
MAX_DECODED_BODY_CHARS = 256 * 1024

# (requestApiKey, requestApiKeyName) -> (api key, JMX name), for the fast path's lookup.
_FAST_APIS = {(k, upper_snake(n)): (k, n) for k, n in API_NAMES.items()}


# The envelope as Kafka writes it. A key the full decode may do without is required here
# when Kafka always writes it (a line without it takes the full decode); a value the
# full decode takes as null is nullable here.
class _Header(msgspec.Struct):
    requestApiKey: int
    requestApiVersion: int
    correlationId: int
    requestApiKeyName: str
    clientId: str | None = None


class _ClientInformation(msgspec.Struct):
    softwareName: str | None
    softwareVersion: str | None


class _Envelope(msgspec.Struct):
    requestHeader: _Header
    request: msgspec.Raw
    response: msgspec.Raw
    connection: str
    totalTimeMs: float
    requestQueueTimeMs: float
    localTimeMs: float
    remoteTimeMs: float
    throttleTimeMs: float
    responseQueueTimeMs: float
    sendTimeMs: float
    securityProtocol: str | None
    principal: str | None
    listener: str | None
    clientInformation: _ClientInformation
    isForwarded: bool | None = None


_ENVELOPE = msgspec.json.Decoder(_Envelope)

ERROR_CODE_RE = re.compile(r'"errorCode":(-?\d+)')
ACKS_RE = re.compile(r'"acks":(-?\d+)')
REPLICA_ID_RE = re.compile(r'"replicaId":(-?\d+)')
RECORDS_SIZE_RE = re.compile(r'"recordsSizeInBytes":(\d+)')
# Lines with a backslash take the full decode, so a string token here holds no escape.
NAME_RE = re.compile(r'"name":"([^"]*)"')
TOPIC_RE = re.compile(r'"topic":"([^"]*)"')
TOPIC_ID_RE = re.compile(r'"topicId":"([A-Za-z0-9_-]+)"')


def parse_json_message_fast(message: str, cluster: str, broker: int, ts_ms: int,
                            controller_listeners: frozenset[str]) -> dict | None:
    """The whole record from a JSON message, bodies searched; None to fall back.

    A document msgspec rejects (malformed, a missing key, a value of another type), a
    number of more digits than Python converts (a ValueError here) and JSON nested deeper
    than a decoder recurses (RecursionError) return None too: the full decode names what
    is wrong.
    """
    body = json_object_text(message)
    if "\\" in body:
        return None
    try:
        return _fast_record(_ENVELOPE.decode(body), cluster, broker, ts_ms,
                            controller_listeners)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None


def _fast_record(doc: _Envelope, cluster: str, broker: int, ts_ms: int,
                 controller_listeners: frozenset[str]) -> dict | None:
    """The envelope's fields, then the bodies searched; None at a surprise."""
    head = doc.requestHeader
    api = _FAST_APIS.get((head.requestApiKey, head.requestApiKeyName))
    if api is None:
        return None  # unknown or mismatched: the full decode says which
    timings = (doc.totalTimeMs, doc.requestQueueTimeMs, doc.localTimeMs, doc.remoteTimeMs,
               doc.throttleTimeMs, doc.responseQueueTimeMs, doc.sendTimeMs)
    if min(timings) < 0 or max(timings) == math.inf:
        return None
    try:
        local_addr, remote_addr = split_connection(doc.connection)
    except BadLine:
        return None
    request_text = bytes(doc.request).decode()
    response_text = bytes(doc.response).decode()
    api_key = api[0]
    commit = NO_COMMIT
    if api_key == PRODUCE:
        facts = _produce_facts(request_text)
    elif api_key == FETCH:
        facts = _fetch_facts(request_text, response_text)
    else:
        decoded = _decoded_body_facts(request_text, api_key)
        if decoded is None:
            return None  # let the full decode say what is wrong with the request body
        facts, commit = decoded
    (acks, fetch_kind, fetch_replica_id, topics, topic_ids, partitions, request_bytes,
     response_bytes) = facts
    info = doc.clientInformation
    listener = doc.listener
    return {
        "cluster": cluster, "broker": broker, "ts_ms": ts_ms,
        "api": api[1], "api_key": api_key, "api_version": head.requestApiVersion,
        "correlation_id": head.correlationId, "client_id": head.clientId,
        "client_software_name": info.softwareName,
        "client_software_version": info.softwareVersion,
        "principal": doc.principal, "listener": listener,
        "security_protocol": doc.securityProtocol,
        "local_addr": local_addr, "remote_addr": remote_addr,
        "total_ms": timings[0], "request_queue_ms": timings[1], "local_ms": timings[2],
        "remote_ms": timings[3], "throttle_ms": timings[4], "response_queue_ms": timings[5],
        "send_ms": timings[6],
        "fetch_kind": fetch_kind, "fetch_replica_id": fetch_replica_id, "acks": acks,
        "topics": topics, "topic_ids": topic_ids, "partition_count": partitions,
        "request_bytes": request_bytes, "response_bytes": response_bytes,
        "error_codes": _error_codes(response_text),
        "is_forwarded": doc.isForwarded,
        "is_controller_traffic": listener is not None and listener in controller_listeners,
        **commit,
    }


# Each body-facts step gives (acks, fetch_kind, fetch_replica_id, topics, topic_ids,
# partition_count, request_bytes, response_bytes), or None to fall back.

def _produce_facts(request_text: str) -> tuple:
    """Acks, topics, partitions and record bytes of a Produce request, searched for."""
    m = ACKS_RE.search(request_text)
    acks = int(m.group(1)) if m else None
    topics = _names(NAME_RE.findall(request_text))
    topic_ids = _ids(TOPIC_ID_RE.findall(request_text))
    partitions = request_text.count('"index":')
    request_bytes = sum(map(int, RECORDS_SIZE_RE.findall(request_text)))
    return acks, None, None, topics, topic_ids, partitions, request_bytes, None


def _fetch_facts(request_text: str, response_text: str) -> tuple:
    """Who fetches, the fetched topics and partitions, and the response's record bytes."""
    forgotten = request_text.find(',"forgottenTopicsData":')
    fetched = request_text if forgotten < 0 else request_text[:forgotten]
    m = REPLICA_ID_RE.search(fetched)
    replica = int(m.group(1)) if m else None
    if replica is not None and replica >= 0:
        fetch_kind, fetch_replica_id = "follower", replica
    else:
        fetch_kind, fetch_replica_id = "consumer", None
    topics = _names(TOPIC_RE.findall(fetched))
    topic_ids = _ids(TOPIC_ID_RE.findall(fetched))
    partitions = fetched.count('"partition":')
    response_bytes = sum(map(int, RECORDS_SIZE_RE.findall(response_text)))
    return None, fetch_kind, fetch_replica_id, topics, topic_ids, partitions, None, response_bytes


def _decoded_body_facts(request_text: str, api_key: int) -> tuple[tuple, dict] | None:
    """Topics and partitions of any other API, and an OffsetCommit's group, member and
    offsets, from its request body decoded (if small)."""
    if len(request_text) > MAX_DECODED_BODY_CHARS:
        request = None
    else:
        request = _decoded_body(request_text)
        if request is None:
            return None  # let the full decode say what is wrong with it
    topics, topic_ids, partitions = walk_topics(request)
    return ((None, None, None, topics, topic_ids, partitions, None, None),
            offset_commit_fields(api_key, request, is_text))


def _error_codes(response_text: str) -> list[int]:
    # Most responses hold only errorCode 0: count before running the regex.
    n_codes = response_text.count('"errorCode":')
    if n_codes and n_codes != (response_text.count('"errorCode":0,')
                               + response_text.count('"errorCode":0}')):
        return kept_error_codes(map(int, ERROR_CODE_RE.findall(response_text)))
    return []


def _decoded_body(text: str) -> dict | None:
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return None
    return body if isinstance(body, dict) else None


def _names(raw: list[str]) -> list[str]:
    return first_unique(raw) if raw else []


def _ids(raw: list[str]) -> list[str]:
    if not raw:
        return []
    unique = dict.fromkeys(raw)
    unique.pop(ZERO_TOPIC_ID, None)
    return first_unique(unique)
