"""Parse one line of Kafka's request log into one `request_stages` record.

The broker writes a line per completed request when ``kafka.request.logger`` is at DEBUG,
in the layout ``[%d] %p %m (%c)``. Since Kafka 2.8 the message is JSON (captured from
Kafka 4.3.1, request and response bodies shortened here):

    [2026-11-22 10:38:40,123] DEBUG Completed request:{"isForwarded":false,
    "requestHeader":{"requestApiKey":0,"requestApiVersion":10,"correlationId":2,
    "clientId":"producer-acks-all","requestApiKeyName":"PRODUCE"},"request":{
    "transactionalId":null,"acks":-1,"timeoutMs":30000,"topicData":[{"name":"orders",
    "partitionData":[{"index":2,"recordsSizeInBytes":23007}]}]},"response":{...},
    "connection":"127.0.0.1:58979-127.0.0.1:48008-0-1","totalTimeMs":158.479,
    "requestQueueTimeMs":2.069,"localTimeMs":102.403,"remoteTimeMs":52.892,
    "throttleTimeMs":0,"responseQueueTimeMs":0.735,"sendTimeMs":0.378,
    "securityProtocol":"PLAINTEXT","principal":"User:ANONYMOUS","listener":"PLAINTEXT",
    "clientInformation":{"softwareName":"confluent-kafka-python",
    "softwareVersion":"2.16.1-rdkafka-2.16.0"}} (kafka.request.logger)

(one line in the file). Up to 2.7 it was text, see `parse_legacy_message`:

    Completed request:RequestHeader(apiKey=LIST_OFFSETS, apiVersion=5, clientId=c,
    correlationId=8799) -- {replicaId=-1,...},response:{...} from connection
    127.0.0.1:62610-127.0.0.1:62622-3;totalTime:0.085,requestQueueTime:0.013,...

Speed matters (the design target is 100,000 records/s through the whole pipeline on two
cores) and a Fetch or Metadata line can be tens of KB, most of it the response body we
drop. So the fast path decodes no JSON for Produce and Fetch: one anchored regex reads the
header at the start of the line, another everything after the last ``,"connection":``
(a key that, unescaped, cannot occur inside the bodies) in the order Kafka writes it, and
the few body facts kept (topics, partition count, bytes, acks, replica id, error codes)
are searched for in the request and response text. Other APIs decode only their (small)
request body. Whenever the fast path meets something it does not expect (another key
order, unbalanced brackets in the bodies, an unknown API, a negative time) it hands the
line to `parse_json_message`, which decodes everything and says what is wrong; tests
check that both give the same record on every captured line. The price: damage inside a
Produce or Fetch body that leaves the brackets balanced goes unnoticed. On the captured
4.3.1 lines the fast path runs about 1.5-2x the full decode (bench/bench_request_log_parser.py).

Each line gives a record (a dict with the columns of schemas/request_stages.py) or a
`Malformed` with a reason: empty_line, oversize_line, not_utf8, not_request_line,
bad_timestamp, truncated_json, invalid_json, missing_field:<key>, wrong_type:<key>,
negative_time:<key>, unknown_api, api_mismatch, bad_connection.
"""

from __future__ import annotations

import json
import re
from datetime import tzinfo

from ingest.kafka_api import (API_KEYS_BY_UPPER, API_NAMES, FETCH, PRODUCE, ApiMismatch,
                              canonical_api, upper_snake)
from ingest.log_time import STAMP_RE, UTC, stamp_to_ms
from ingest.malformed import Malformed, checked_text, json_error_reason

SOURCE = "request_log"

# A line longer than this is quarantined unread. Metadata responses of very large clusters
# are the longest legitimate lines; raise it if those are quarantined as oversize.
MAX_LINE_CHARS = 8 * 1024 * 1024
CONTROLLER_LISTENERS = frozenset({"CONTROLLER"})
MAX_TOPICS = 20
MAX_ERROR_CODES = 10
# Request bodies of the APIs without a regex path are decoded only up to this size.
MAX_DECODED_BODY_CHARS = 256 * 1024
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID: "no id", sent beside a name

# JSON key of each stage time -> record column.
TIMINGS = (
    ("totalTimeMs", "total_ms"),
    ("requestQueueTimeMs", "request_queue_ms"),
    ("localTimeMs", "local_ms"),
    ("remoteTimeMs", "remote_ms"),
    ("throttleTimeMs", "throttle_ms"),
    ("responseQueueTimeMs", "response_queue_ms"),
    ("sendTimeMs", "send_ms"),
)
# The same stages in the pre-2.8 text line.
LEGACY_TIMINGS = (
    ("totalTime", "total_ms"),
    ("requestQueueTime", "request_queue_ms"),
    ("localTime", "local_ms"),
    ("remoteTime", "remote_ms"),
    ("throttleTime", "throttle_ms"),
    ("responseQueueTime", "response_queue_ms"),
    ("sendTime", "send_ms"),
)

# (requestApiKey, requestApiKeyName) -> (api key, JMX name), for the fast path's lookup.
_FAST_APIS = {(k, upper_snake(n)): (k, n) for k, n in API_NAMES.items()}

LINE_RE = re.compile(r"\[(" + STAMP_RE.pattern + r")\] ([A-Z]+) Completed request:")
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

LOGGER_SUFFIX_RE = re.compile(r" \([A-Za-z_$][\w$.-]*\)$")
LEGACY_HEADER_RE = re.compile(
    r"RequestHeader\(apiKey=([A-Z_]+), (?:apiVersion=(-?\d+), )?clientId=(.*?), "
    r"correlationId=(-?\d+)(?:, headerVersion=\d+)?\) -- ")
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


class _Bad(Exception):
    """Internal: stop parsing with this Malformed reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def parse_request_line(line: str | bytes, *, cluster: str, broker: int, tz: tzinfo = UTC,
                       controller_listeners: frozenset[str] = CONTROLLER_LISTENERS,
                       full_decode: bool = False) -> dict | Malformed:
    """One request-log line -> a request_stages record, or Malformed with a reason.

    `tz` is the zone the broker logs in; `controller_listeners` the broker's
    controller.listener.names (requests on them are KRaft quorum traffic). `full_decode`
    skips the fast path (tests compare the two; it is also a switch for debugging).
    """
    checked = checked_text(line, SOURCE, MAX_LINE_CHARS)
    if isinstance(checked, Malformed):
        return checked
    line, text = checked
    m = LINE_RE.match(text)
    if m is None:
        return Malformed(SOURCE, "not_request_line", line)
    try:
        ts_ms = stamp_to_ms(m.group(1), tz)
    except ValueError:
        return Malformed(SOURCE, "bad_timestamp", line)
    message = text[m.end():]
    try:
        if message.startswith("{"):
            if not full_decode:
                rec = parse_json_message_fast(message, cluster, broker, ts_ms,
                                              controller_listeners)
                if rec is not None:
                    return rec
            rec = parse_json_message(message)
        elif message.lstrip().startswith("RequestHeader("):
            rec = parse_legacy_message(message.lstrip())
        else:
            raise _Bad("not_request_line")
    except _Bad as bad:
        return Malformed(SOURCE, bad.reason, line, ts_ms)
    rec["cluster"] = cluster
    rec["broker"] = broker
    rec["ts_ms"] = ts_ms
    rec["is_controller_traffic"] = rec["listener"] in controller_listeners
    return {k: rec[k] for k in RECORD_FIELDS}


# ---- the JSON line (Kafka 2.8+) ----------------------------------------------------------

def _json_object_text(message: str) -> str:
    """The JSON object of the message, without the `` (kafka.request.logger)`` suffix."""
    end = message.rfind(" (")
    if not message.endswith(")") or end < 0:
        raise _Bad("truncated_json")  # the line was cut before the logger name
    body = message[:end]
    if not body.endswith("}"):
        raise _Bad("truncated_json")
    return body


def _loads(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise _Bad(json_error_reason(e, text)) from None
    except RecursionError:
        raise _Bad("invalid_json") from None


def parse_json_message_fast(message: str, cluster: str, broker: int, ts_ms: int,
                            controller_listeners: frozenset[str]) -> dict | None:
    """The whole record from a JSON message without decoding it; None to fall back.

    Two anchored regexes read the header (start of the line) and everything after the
    request and response bodies (end of the line), in the key order Kafka writes them; the
    bodies are only searched. Anything unexpected returns None and the full decode runs.
    """
    body = _json_object_text(message)
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
    (conn, total, queue, local, remote, throttle, response_queue, send, protocol, principal,
     listener, sw_name, sw_version) = tail.groups()
    timings = (float(total), float(queue), float(local), float(remote), float(throttle),
               float(response_queue), float(send))
    if min(timings) < 0:
        return None
    connection = conn.split("-")
    if len(connection) not in (3, 4) or ":" not in connection[0] or ":" not in connection[1]:
        return None
    middle = body[head.end():conn_at]
    # The bodies are searched, not decoded: unbalanced brackets (damage, or a string that
    # holds one) send the line to the full decode, which tells them apart.
    if middle.count("{") != middle.count("}") or middle.count("[") != middle.count("]"):
        return None
    resp_at = middle.find(RESPONSE_KEY)
    if resp_at < 0:
        return None
    request_text = middle[:resp_at]
    response_text = middle[resp_at + len(RESPONSE_KEY):]
    api_key = api[0]
    acks = fetch_kind = fetch_replica_id = request_bytes = response_bytes = None
    if api_key == PRODUCE:
        m = ACKS_RE.search(request_text)
        acks = int(m.group(1)) if m else None
        topics = _names(NAME_RE.findall(request_text))
        topic_ids = _ids(TOPIC_ID_RE.findall(request_text))
        partitions = request_text.count('"index":')
        request_bytes = sum(map(int, RECORDS_SIZE_RE.findall(request_text)))
    elif api_key == FETCH:
        forgotten = request_text.find(',"forgottenTopicsData":')
        fetched = request_text if forgotten < 0 else request_text[:forgotten]
        m = REPLICA_ID_RE.search(fetched)
        replica = int(m.group(1)) if m else None
        if replica is not None and replica >= 0:
            fetch_kind, fetch_replica_id = "follower", replica
        else:
            fetch_kind = "consumer"
        topics = _names(TOPIC_RE.findall(fetched))
        topic_ids = _ids(TOPIC_ID_RE.findall(fetched))
        partitions = fetched.count('"partition":')
        response_bytes = sum(map(int, RECORDS_SIZE_RE.findall(response_text)))
    else:
        if len(request_text) > MAX_DECODED_BODY_CHARS:
            request = None
        else:
            request = _decoded_body(request_text)
            if request is None:
                return None  # let the full decode say what is wrong with it
        topics, topic_ids, partitions = _walk_topics(request)
    # Most responses hold only errorCode 0: count before running the regex.
    n_codes = response_text.count('"errorCode":')
    if n_codes and n_codes != (response_text.count('"errorCode":0,')
                               + response_text.count('"errorCode":0}')):
        error_codes = _error_codes(map(int, ERROR_CODE_RE.findall(response_text)))
    else:
        error_codes = []
    client_id = head.group(5)
    forwarded = head.group(1)
    return {
        "cluster": cluster, "broker": broker, "ts_ms": ts_ms,
        "api": api[1], "api_key": api_key, "api_version": int(head.group(3)),
        "correlation_id": int(head.group(4)),
        "client_id": None if client_id is None or client_id == "null" else _jstr(client_id),
        "client_software_name": _jstr(sw_name), "client_software_version": _jstr(sw_version),
        "principal": _jstr(principal), "listener": _jstr(listener), "security_protocol": protocol,
        "local_addr": connection[0], "remote_addr": connection[1],
        "total_ms": timings[0], "request_queue_ms": timings[1], "local_ms": timings[2],
        "remote_ms": timings[3], "throttle_ms": timings[4], "response_queue_ms": timings[5],
        "send_ms": timings[6],
        "fetch_kind": fetch_kind, "fetch_replica_id": fetch_replica_id, "acks": acks,
        "topics": topics, "topic_ids": topic_ids, "partition_count": partitions,
        "request_bytes": request_bytes, "response_bytes": response_bytes,
        "error_codes": error_codes,
        "is_forwarded": None if forwarded is None else forwarded == "true",
        "is_controller_traffic": listener is not None and _jstr(listener) in controller_listeners,
    }


def _jstr(quoted: str | None) -> str | None:
    """A JSON string token (with its quotes) as text; "null" as None."""
    if quoted is None or quoted == "null":
        return None
    return json.loads(quoted) if "\\" in quoted else quoted[1:-1]


def _names(raw: list[str]) -> list[str]:
    return _first_unique(_unescape(n) for n in raw) if raw else []


def _ids(raw: list[str]) -> list[str]:
    return _first_unique(i for i in raw if i != ZERO_TOPIC_ID) if raw else []


def parse_json_message(message: str) -> dict:
    """The record from a JSON message, decoding all of it (the slow, sure path)."""
    doc = _loads(_json_object_text(message))
    if not isinstance(doc, dict):
        raise _Bad("wrong_type:message")
    header = doc.get("requestHeader")
    if header is None:
        raise _Bad("missing_field:requestHeader")
    if not isinstance(header, dict):
        raise _Bad("wrong_type:requestHeader")
    rec = _header_fields(header)
    forwarded = doc.get("isForwarded")
    rec["is_forwarded"] = forwarded if isinstance(forwarded, bool) else None
    rec.update(_tail_fields(doc))
    request, response = doc.get("request"), doc.get("response")
    rec.update(_body_fields(rec["api_key"], request if isinstance(request, dict) else None,
                            response if isinstance(response, dict) else None))
    rec["error_codes"] = _error_codes(_walk_error_codes(response))
    return rec


def _int_field(d: dict, key: str, required: bool = True) -> int | None:
    v = d.get(key)
    if v is None:
        if required:
            raise _Bad(f"missing_field:{key}")
        return None
    if type(v) is not int:
        raise _Bad(f"wrong_type:{key}")
    return v


def _str_field(d: dict, key: str) -> str | None:
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise _Bad(f"wrong_type:{key}")
    return v


def _header_fields(header: dict) -> dict:
    api_key = _int_field(header, "requestApiKey")
    key_name = _str_field(header, "requestApiKeyName")
    try:
        api = canonical_api(api_key, key_name)
    except ApiMismatch:
        raise _Bad("api_mismatch") from None
    if api is None:
        raise _Bad("unknown_api")
    return {
        "api": api[1],
        "api_key": api[0],
        "api_version": _int_field(header, "requestApiVersion"),
        "correlation_id": _int_field(header, "correlationId"),
        "client_id": _str_field(header, "clientId"),
    }


def _tail_fields(doc: dict) -> dict:
    rec: dict = {}
    for key, col in TIMINGS:
        v = doc.get(key)
        if v is None:
            raise _Bad(f"missing_field:{key}")
        if type(v) is not float and type(v) is not int or v != v:
            raise _Bad(f"wrong_type:{key}")
        if v < 0:
            raise _Bad(f"negative_time:{key}")
        rec[col] = float(v)
    conn = doc.get("connection")
    if conn is None:
        raise _Bad("missing_field:connection")
    if not isinstance(conn, str):
        raise _Bad("wrong_type:connection")
    rec["local_addr"], rec["remote_addr"] = split_connection(conn)
    info = doc.get("clientInformation")
    if info is not None and not isinstance(info, dict):
        raise _Bad("wrong_type:clientInformation")
    info = info or {}
    rec["client_software_name"] = _str_field(info, "softwareName")
    rec["client_software_version"] = _str_field(info, "softwareVersion")
    rec["principal"] = _str_field(doc, "principal")
    rec["listener"] = _str_field(doc, "listener")
    rec["security_protocol"] = _str_field(doc, "securityProtocol")
    return rec


def split_connection(conn: str) -> tuple[str, str]:
    """``localIp:localPort-remoteIp:remotePort-processor-index`` -> (local, remote).

    IPv6 addresses hold colons but never dashes, so dashes split safely. Up to 2.x the
    id had no trailing connection index: ``local-remote-processor``.
    """
    parts = conn.split("-")
    if len(parts) not in (3, 4) or ":" not in parts[0] or ":" not in parts[1]:
        raise _Bad("bad_connection")
    return parts[0], parts[1]


# ---- body facts --------------------------------------------------------------------------

def _unescape(s: str) -> str:
    return json.loads(f'"{s}"') if "\\" in s else s


def _first_unique(values, limit: int = MAX_TOPICS) -> list[str]:
    out: list[str] = []
    for v in values:
        if v not in out:
            out.append(v)
            if len(out) == limit:
                break
    return out


def _fetch_kind(replica_id: int | None) -> dict:
    # Consumers send replicaId -1 (or -2/-3 for special readers) up to v14 and no replica
    # state at all from v15; a follower (or a KRaft voter) sends its node id.
    if replica_id is not None and replica_id >= 0:
        return {"fetch_kind": "follower", "fetch_replica_id": replica_id}
    return {"fetch_kind": "consumer", "fetch_replica_id": None}


def _decoded_body(text: str) -> dict | None:
    try:
        body = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def _body_fields(api_key: int, request: dict | None, response: dict | None) -> dict:
    """Body facts from decoded bodies (every API; Produce and Fetch too on the slow path)."""
    rec = {"acks": None, "request_bytes": None, "response_bytes": None,
           "fetch_kind": None, "fetch_replica_id": None}
    topics, topic_ids, partitions = _walk_topics(request)
    rec.update(topics=topics, topic_ids=topic_ids, partition_count=partitions)
    if request is None:
        return rec
    if api_key == PRODUCE:
        acks = request.get("acks")
        rec["acks"] = acks if type(acks) is int else None
        rec["request_bytes"] = sum(
            p.get("recordsSizeInBytes", 0) for t in _list(request.get("topicData"))
            for p in _list(t.get("partitionData") if isinstance(t, dict) else None)
            if isinstance(p, dict) and type(p.get("recordsSizeInBytes", 0)) is int)
    elif api_key == FETCH:
        replica = request.get("replicaId")
        state = request.get("replicaState")
        if replica is None and isinstance(state, dict):
            replica = state.get("replicaId")
        rec.update(_fetch_kind(replica if type(replica) is int else None))
        if response is not None:
            rec["response_bytes"] = sum(
                p.get("recordsSizeInBytes", 0) for t in _list(response.get("responses"))
                for p in _list(t.get("partitions") if isinstance(t, dict) else None)
                if isinstance(p, dict) and type(p.get("recordsSizeInBytes", 0)) is int)
    return rec


def _list(v) -> list:
    return v if isinstance(v, list) else []


_TOPIC_LIST_KEYS = ("topics", "topicData")
_TOPIC_NAME_KEYS = ("name", "topic", "topicName")
_PARTITION_LIST_KEYS = ("partitions", "partitionData", "partitionIndexes")


def _topic_entries(request: dict) -> list | None:
    """The request's topic list: top level, or inside each group (OffsetFetch v8+)."""
    for key in _TOPIC_LIST_KEYS:
        if isinstance(request.get(key), list):
            return request[key]
    groups = request.get("groups")
    if isinstance(groups, list):
        return [t for g in groups if isinstance(g, dict) for t in _list(g.get("topics"))]
    return None


def _walk_topics(request: dict | None) -> tuple[list[str] | None, list[str] | None, int | None]:
    """Topic names, topic ids and partition count of a request's topic list."""
    if request is None:
        return None, None, None
    entries = _topic_entries(request)
    if entries is None:
        return [], [], None
    # An empty list counts no partitions; entries without partition lists (Metadata,
    # CreateTopics) leave the count unknown.
    names, ids, partitions = [], [], None if entries else 0
    for t in entries:
        if not isinstance(t, dict):
            continue
        for key in _TOPIC_NAME_KEYS:
            if isinstance(t.get(key), str):
                names.append(t[key])
                break
        if isinstance(t.get("topicId"), str) and t["topicId"] != ZERO_TOPIC_ID:
            ids.append(t["topicId"])
        for key in _PARTITION_LIST_KEYS:
            if isinstance(t.get(key), list):
                partitions = (partitions or 0) + len(t[key])
                break
    return _first_unique(names), _first_unique(ids), partitions


def _walk_error_codes(node) -> list[int]:
    out: list[int] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            for k, v in n.items():
                if k == "errorCode" and type(v) is int:
                    out.append(v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(n, list):
            stack.extend(x for x in n if isinstance(x, (dict, list)))
    return out


def _error_codes(codes) -> list[int]:
    return sorted({c for c in codes if c != 0})[:MAX_ERROR_CODES]


# ---- the text line (up to Kafka 2.7) -----------------------------------------------------

def parse_legacy_message(message: str) -> dict:
    """The record from a pre-2.8 text message (RequestChannel's StringBuilder line)."""
    suffix = LOGGER_SUFFIX_RE.search(message)
    if suffix is not None:
        message = message[:suffix.start()]
    head = LEGACY_HEADER_RE.match(message)
    if head is None:
        raise _Bad("missing_field:RequestHeader")
    key_name = head.group(1)
    api_key = API_KEYS_BY_UPPER.get(key_name)
    try:
        api = canonical_api(api_key, key_name)
    except ApiMismatch:
        raise _Bad("api_mismatch") from None
    if api is None:
        raise _Bad("unknown_api")
    conn_at = message.rfind(" from connection ")
    if conn_at < 0:
        raise _Bad("truncated_line")
    desc = message[head.end():conn_at]
    tail = message[conn_at + len(" from connection "):]
    semi = tail.find(";")
    if semi < 0:
        raise _Bad("truncated_line")
    local, remote = split_connection(tail[:semi])
    rec = {
        "api": api[1], "api_key": api[0],
        "api_version": int(head.group(2)) if head.group(2) is not None else None,
        "correlation_id": int(head.group(4)),
        "client_id": head.group(3),
        "is_forwarded": None,
        "local_addr": local, "remote_addr": remote,
    }
    for key, col, rx in LEGACY_TIMING_RES:
        m = rx.search(tail)
        if m is None:
            raise _Bad(f"missing_field:{key}")
        v = float(m.group(1))
        if v < 0:
            raise _Bad(f"negative_time:{key}")
        rec[col] = v
    proto = LEGACY_PROTOCOL_RE.search(tail)
    who = LEGACY_PRINCIPAL_RE.search(tail)
    client = LEGACY_CLIENT_RE.search(tail)
    rec["security_protocol"] = proto.group(1) if proto else None
    rec["principal"] = who.group(1) if who else None
    rec["listener"] = who.group(2) if who else None
    rec["client_software_name"] = client.group(1) if client else None
    rec["client_software_version"] = client.group(2) if client else None
    resp = LEGACY_RESPONSE_RE.search(desc)
    request_desc = desc[:resp.start()] if resp else desc
    response_desc = desc[resp.end():] if resp else ""
    acks = LEGACY_ACKS_RE.search(request_desc) if api[0] == PRODUCE else None
    num = LEGACY_NUM_PARTITIONS_RE.search(request_desc)
    rec["acks"] = int(acks.group(1)) if acks else None
    rec["topics"] = _first_unique(LEGACY_TOPIC_RE.findall(request_desc))
    rec["topic_ids"] = []
    rec["partition_count"] = (int(num.group(1)) if num
                              else len(LEGACY_PARTITION_RE.findall(request_desc)) or None)
    rec["request_bytes"] = None
    rec["response_bytes"] = None
    if api[0] == FETCH:
        replica = LEGACY_REPLICA_RE.search(request_desc)
        rec.update(_fetch_kind(int(replica.group(1)) if replica else None))
    else:
        rec.update(fetch_kind=None, fetch_replica_id=None)
    rec["error_codes"] = _error_codes(int(c) for c in LEGACY_ERROR_RE.findall(response_desc))
    return rec


# ---- the record --------------------------------------------------------------------------

RECORD_FIELDS = (
    "cluster", "broker", "ts_ms", "api", "api_key", "api_version", "correlation_id",
    "client_id", "client_software_name", "client_software_version", "principal", "listener",
    "security_protocol", "local_addr", "remote_addr", "total_ms", "request_queue_ms",
    "local_ms", "remote_ms", "throttle_ms", "response_queue_ms", "send_ms", "fetch_kind",
    "fetch_replica_id", "acks", "topics", "topic_ids", "partition_count", "request_bytes",
    "response_bytes", "error_codes", "is_forwarded", "is_controller_traffic",
)

