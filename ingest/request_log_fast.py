"""The fast path for a JSON request-log message (Kafka 2.8+): a string scan, no full decode.

Speed matters (the design target is 100,000 records/s through the whole pipeline on two
cores) and a Fetch or Metadata line can be tens of KB, most of it the response body we
drop. So this path decodes no JSON for Produce and Fetch: one anchored regex reads the
header at the start of the line, another everything after the last ``,"connection":``
(a key that, unescaped, cannot occur inside the bodies) in the order Kafka writes it, and
the few body facts kept (topics, partition count, bytes, acks, replica id, error codes)
are searched for in the request and response text. Other APIs decode only their (small)
request body (an OffsetCommit's group, member and offsets come from it, as on the full
decode). Whenever this path meets something it does not expect (another key order,
unbalanced brackets in the bodies, an unknown API, a negative time) it returns None and
the line goes to `request_log_json.parse_json_message`, which decodes everything and says
what is wrong; tests check that both give the same record on every captured line. The
price: damage inside a Produce or Fetch body that leaves the brackets balanced goes
unnoticed. On the captured 4.3.1 lines this path runs about 1.5-2x the full decode
(bench/bench_request_log_parser.py).
"""

from __future__ import annotations

import json
import math
import re

from ingest.kafka_api import API_NAMES, FETCH, PRODUCE, upper_snake
from ingest.request_log_json import ZERO_TOPIC_ID, is_text, json_object_text, walk_topics
from ingest.request_log_record import (NO_COMMIT, first_unique, kept_error_codes,
                                       offset_commit_fields)

# Request bodies of the APIs without a regex path are decoded only up to this size.
MAX_DECODED_BODY_CHARS = 256 * 1024

# (requestApiKey, requestApiKeyName) -> (api key, JMX name), for the fast path's lookup.
_FAST_APIS = {(k, upper_snake(n)): (k, n) for k, n in API_NAMES.items()}

CONNECTION_KEY = ',"connection":'
_NUM_TEXT = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_NUM = "(" + _NUM_TEXT + ")"
# A JSON string token: the unrolled form is several times faster than (?:[^"\\]|\\.)*.
_STR = r'("[^"\\]*(?:\\.[^"\\]*)*"|null)'
FAST_HEAD_RE = re.compile(
    r'\{(?:"isForwarded":(true|false),)?"requestHeader":\{"requestApiKey":(\d+),'
    r'"requestApiVersion":(\d+),"correlationId":(-?\d+),(?:"clientId":' + _STR + r',)?'
    r'"requestApiKeyName":"([A-Z][A-Z0-9_]*)"(?:,"requestApiVersionDeprecated":(?:true|false))?'
    r'\},"request":')
FAST_TAIL_RE = re.compile(
    r',"connection":"([^"\\]*)","totalTimeMs":' + _NUM + ',"requestQueueTimeMs":' + _NUM +
    ',"localTimeMs":' + _NUM + ',"remoteTimeMs":' + _NUM + ',"throttleTimeMs":' + _NUM +
    ',"responseQueueTimeMs":' + _NUM + ',"sendTimeMs":' + _NUM +
    r',"securityProtocol":"([A-Z_]+)","principal":' + _STR + ',"listener":' + _STR +
    r',"clientInformation":\{"softwareName":' + _STR + ',"softwareVersion":' + _STR + r'\}'
    r'(?:,"temporaryMemoryBytes":\d+)?(?:,"messageConversionsTime":' + _NUM_TEXT + r')?\}$')
RESPONSE_KEY = ',"response":'

ERROR_CODE_RE = re.compile(r'"errorCode":(-?\d+)')
ACKS_RE = re.compile(r'"acks":(-?\d+)')
REPLICA_ID_RE = re.compile(r'"replicaId":(-?\d+)')
RECORDS_SIZE_RE = re.compile(r'"recordsSizeInBytes":(\d+)')
JSON_STRING = r'"([^"\\]*(?:\\.[^"\\]*)*)"'
NAME_RE = re.compile(r'"name":' + JSON_STRING)
TOPIC_RE = re.compile(r'"topic":' + JSON_STRING)
TOPIC_ID_RE = re.compile(r'"topicId":"([A-Za-z0-9_-]+)"')


def parse_json_message_fast(message: str, cluster: str, broker: int, ts_ms: int,
                            controller_listeners: frozenset[str]) -> dict | None:
    """The whole record from a JSON message without decoding it; None to fall back.

    Two anchored regexes read the header (start of the line) and everything after the
    request and response bodies (end of the line), in the key order Kafka writes them; the
    bodies are only searched. Anything unexpected returns None and the full decode runs;
    so does a string the regexes read with a bad escape, or a number of more digits than
    Python converts (both a ValueError here): the full decode names what is wrong.
    """
    try:
        return _fast_record(message, cluster, broker, ts_ms, controller_listeners)
    except ValueError:
        return None


def _fast_record(message: str, cluster: str, broker: int, ts_ms: int,
                 controller_listeners: frozenset[str]) -> dict | None:
    """Locate the parts, read the tail, search the bodies, in that order; None at a surprise."""
    located = _locate(json_object_text(message))
    if located is None:
        return None
    head, tail, api, request_text, response_text = located
    tail_values = _tail_values(tail)
    if tail_values is None:
        return None
    timings, connection, protocol, principal, listener, sw_name, sw_version = tail_values
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
    error_codes = _error_codes(response_text)
    # The strings last, after the bodies: a reason a body gives (walk_topics' bad_escape)
    # comes before a bad escape in the strings, which sends the line to the full decode.
    client_id, sw_name, sw_version, principal, listener = _texts(
        head.group(5), sw_name, sw_version, principal, listener)
    forwarded = head.group(1)
    return {
        "cluster": cluster, "broker": broker, "ts_ms": ts_ms,
        "api": api[1], "api_key": api_key, "api_version": int(head.group(3)),
        "correlation_id": int(head.group(4)), "client_id": client_id,
        "client_software_name": sw_name, "client_software_version": sw_version,
        "principal": principal, "listener": listener, "security_protocol": protocol,
        "local_addr": connection[0], "remote_addr": connection[1],
        "total_ms": timings[0], "request_queue_ms": timings[1], "local_ms": timings[2],
        "remote_ms": timings[3], "throttle_ms": timings[4], "response_queue_ms": timings[5],
        "send_ms": timings[6],
        "fetch_kind": fetch_kind, "fetch_replica_id": fetch_replica_id, "acks": acks,
        "topics": topics, "topic_ids": topic_ids, "partition_count": partitions,
        "request_bytes": request_bytes, "response_bytes": response_bytes,
        "error_codes": error_codes,
        "is_forwarded": None if forwarded is None else forwarded == "true",
        "is_controller_traffic": listener is not None and listener in controller_listeners,
        **commit,
    }


def _locate(body: str) -> tuple[re.Match, re.Match, tuple[int, str], str, str] | None:
    """The header and tail matches, the API, the request text and the response text; None
    if a part is not where Kafka writes it or the bodies' brackets do not balance."""
    head = FAST_HEAD_RE.match(body)
    if head is None:
        return None
    conn_at = body.rfind(CONNECTION_KEY)
    if conn_at < head.end():
        return None
    tail = FAST_TAIL_RE.match(body, conn_at)
    if tail is None:
        return None
    api = _FAST_APIS.get((int(head.group(2)), head.group(6)))
    if api is None:
        return None  # unknown or mismatched: the full decode says which
    middle = body[head.end():conn_at]
    # The bodies are searched, not decoded: unbalanced brackets (damage, or a string that
    # holds one) send the line to the full decode, which tells them apart.
    if middle.count("{") != middle.count("}") or middle.count("[") != middle.count("]"):
        return None
    resp_at = middle.find(RESPONSE_KEY)
    if resp_at < 0:
        return None
    return head, tail, api, middle[:resp_at], middle[resp_at + len(RESPONSE_KEY):]


def _tail_values(tail: re.Match) -> tuple | None:
    """The seven timings (finite, none negative), the connection's parts and the tail's
    string tokens; None if a time or the connection is out of shape."""
    (conn, total, queue, local, remote, throttle, response_queue, send, protocol, principal,
     listener, sw_name, sw_version) = tail.groups()
    timings = (float(total), float(queue), float(local), float(remote), float(throttle),
               float(response_queue), float(send))
    if min(timings) < 0 or max(timings) == math.inf:
        return None
    connection = conn.split("-")
    if len(connection) not in (3, 4) or ":" not in connection[0] or ":" not in connection[1]:
        return None
    return timings, connection, protocol, principal, listener, sw_name, sw_version


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


def _texts(*tokens: str | None) -> list[str | None]:
    """JSON string tokens (with their quotes) as text; "null" (or no token) as None.

    ValueError for a bad escape, or one that gives no Unicode text (a lone surrogate).
    """
    return [None if q is None or q == "null" else _unescape(q[1:-1]) if "\\" in q else q[1:-1]
            for q in tokens]


def _names(raw: list[str]) -> list[str]:
    return first_unique(_unescape(n) for n in raw) if raw else []


def _ids(raw: list[str]) -> list[str]:
    return first_unique(i for i in raw if i != ZERO_TOPIC_ID) if raw else []


def _unescape(s: str) -> str:
    """The text of a JSON string's inside; ValueError for a bad escape or a lone surrogate."""
    if "\\" not in s:
        return s
    text = json.loads(f'"{s}"')
    text.encode("utf-8")  # UnicodeEncodeError (a ValueError) for a lone surrogate
    return text
