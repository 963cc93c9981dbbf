"""The full decode of a JSON request-log message (Kafka 2.8+): the slow, sure path.

It decodes the whole message with `json.loads` and checks every field it keeps, so it
names what is wrong with a damaged line (truncated_json, invalid_json, bad_escape:<key>,
oversize_number, nested_too_deep, missing_field:<key>, wrong_type:<key>,
negative_time:<key>, unknown_api, api_mismatch, bad_connection). The fast string scan
(request_log_fast) hands every line it does not expect to this path, and tests check that
both give the same record on every captured line. The walk of a decoded request's topic list is shared with the fast path,
which decodes the (small) request body of the APIs it has no regex for.
"""

from __future__ import annotations

import json
import math
import re

from ingest.kafka_api import FETCH, PRODUCE, ApiMismatch, canonical_api
from ingest.malformed import json_error_reason
from ingest.request_log_record import (BadLine, fetch_kind_fields, first_unique,
                                      kept_error_codes, offset_commit_fields, split_connection)

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

# The JSON key whose string value starts right after it (a bad escape's field).
KEY_BEFORE_VALUE_RE = re.compile(r'"([A-Za-z_][A-Za-z0-9_]{0,63})":$')


def json_object_text(message: str) -> str:
    """The JSON object of the message, without the `` (kafka.request.logger)`` suffix."""
    end = message.rfind(" (")
    if not message.endswith(")") or end < 0:
        raise BadLine("truncated_json")  # the line was cut before the logger name
    body = message[:end]
    if not body.endswith("}"):
        raise BadLine("truncated_json")
    return body


def parse_json_message(message: str) -> dict:
    """The record from a JSON message, decoding all of it (the slow, sure path)."""
    doc = _loads(json_object_text(message))
    if not isinstance(doc, dict):
        raise BadLine("wrong_type:message")
    header = doc.get("requestHeader")
    if header is None:
        raise BadLine("missing_field:requestHeader")
    if not isinstance(header, dict):
        raise BadLine("wrong_type:requestHeader")
    rec = _header_fields(header)
    forwarded = doc.get("isForwarded")
    rec["is_forwarded"] = forwarded if isinstance(forwarded, bool) else None
    rec.update(_tail_fields(doc))
    request, response = doc.get("request"), doc.get("response")
    rec.update(_body_fields(rec["api_key"], request if isinstance(request, dict) else None,
                            response if isinstance(response, dict) else None))
    rec["error_codes"] = kept_error_codes(_walk_error_codes(response))
    return rec


def _loads(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg.startswith("Invalid \\"):  # "Invalid \\escape", "Invalid \\uXXXX escape"
            raise BadLine(_bad_escape_reason(text, e.pos)) from None
        raise BadLine(json_error_reason(e, text)) from None
    except RecursionError:  # nested deeper than the decoder recurses; Kafka nests a few levels
        raise BadLine("nested_too_deep") from None
    except ValueError:  # a number of more digits than int() converts
        raise BadLine("oversize_number") from None


def _bad_escape_reason(text: str, pos: int) -> str:
    """bad_escape:<key> for a bad escape at `pos` inside the string value of <key>."""
    start = pos
    while True:  # the string's opening quote: the last quote before pos no backslash escapes
        start = text.rfind('"', 0, start)
        if start < 0:
            return "bad_escape"
        i = start - 1
        while i >= 0 and text[i] == "\\":
            i -= 1
        if (start - 1 - i) % 2 == 0:
            break
    key = KEY_BEFORE_VALUE_RE.search(text, max(0, start - 70), start)
    return f"bad_escape:{key.group(1)}" if key else "bad_escape"


def is_text(s: str) -> bool:
    """False for a string holding a lone surrogate (from an escape like \\ud800)."""
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# ---- header and tail ---------------------------------------------------------------------

def _int_field(d: dict, key: str, required: bool = True) -> int | None:
    v = d.get(key)
    if v is None:
        if required:
            raise BadLine(f"missing_field:{key}")
        return None
    if type(v) is not int:
        raise BadLine(f"wrong_type:{key}")
    return v


def _str_field(d: dict, key: str) -> str | None:
    v = d.get(key)
    if v is not None:
        if not isinstance(v, str):
            raise BadLine(f"wrong_type:{key}")
        if not is_text(v):
            raise BadLine(f"bad_escape:{key}")
    return v


def _header_fields(header: dict) -> dict:
    api_key = _int_field(header, "requestApiKey")
    key_name = _str_field(header, "requestApiKeyName")
    try:
        api = canonical_api(api_key, key_name)
    except ApiMismatch:
        raise BadLine("api_mismatch") from None
    if api is None:
        raise BadLine("unknown_api")
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
            raise BadLine(f"missing_field:{key}")
        if type(v) is not float and type(v) is not int or v != v:
            raise BadLine(f"wrong_type:{key}")
        if v < 0:
            raise BadLine(f"negative_time:{key}")
        try:
            rec[col] = float(v)
        except OverflowError:  # an int beyond the float range
            raise BadLine(f"wrong_type:{key}") from None
        if rec[col] == math.inf:
            raise BadLine(f"wrong_type:{key}")
    conn = _str_field(doc, "connection")
    if conn is None:
        raise BadLine("missing_field:connection")
    rec["local_addr"], rec["remote_addr"] = split_connection(conn)
    info = doc.get("clientInformation")
    if info is not None and not isinstance(info, dict):
        raise BadLine("wrong_type:clientInformation")
    info = info or {}
    rec["client_software_name"] = _str_field(info, "softwareName")
    rec["client_software_version"] = _str_field(info, "softwareVersion")
    rec["principal"] = _str_field(doc, "principal")
    rec["listener"] = _str_field(doc, "listener")
    rec["security_protocol"] = _str_field(doc, "securityProtocol")
    return rec


# ---- body facts --------------------------------------------------------------------------

def _body_fields(api_key: int, request: dict | None, response: dict | None) -> dict:
    """Body facts from decoded bodies (every API; Produce and Fetch too on the slow path)."""
    rec = {"acks": None, "request_bytes": None, "response_bytes": None,
           "fetch_kind": None, "fetch_replica_id": None}
    topics, topic_ids, partitions = walk_topics(request)
    rec.update(topics=topics, topic_ids=topic_ids, partition_count=partitions)
    rec.update(offset_commit_fields(api_key, request, is_text))
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
        rec.update(fetch_kind_fields(replica if type(replica) is int else None))
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


def walk_topics(request: dict | None) -> tuple[list[str] | None, list[str] | None, int | None]:
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
                if not is_text(t[key]):
                    raise BadLine(f"bad_escape:{key}")
                names.append(t[key])
                break
        if isinstance(t.get("topicId"), str) and t["topicId"] != ZERO_TOPIC_ID:
            if not is_text(t["topicId"]):
                raise BadLine("bad_escape:topicId")
            ids.append(t["topicId"])
        for key in _PARTITION_LIST_KEYS:
            if isinstance(t.get(key), list):
                partitions = (partitions or 0) + len(t[key])
                break
    return first_unique(names), first_unique(ids), partitions


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
