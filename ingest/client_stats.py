"""Flatten one librdkafka statistics payload into `client_stats` records.

librdkafka emits a JSON document every ``statistics.interval.ms``; confluent-kafka hands it
to ``stats_cb`` from poll()/flush(). Shortened, as captured from confluent-kafka 2.16.1
(librdkafka 2.16.0) consuming from Kafka 4.3.1:

    {"name": "fixture-group-client#consumer-4", "client_id": "fixture-group-client",
     "type": "consumer", "ts": 629112938, "time": 1795343937, "msg_cnt": 0, ...
     "brokers": {"127.0.0.1:42897/2": {"name": "127.0.0.1:42897/2", "nodeid": 2,
        "state": "UP", "txerrs": 0, "rxerrs": 0, "req_timeouts": 0,
        "rtt": {"min": 502909, "avg": 503605, "p50": 503807, "p99": 505855, ...},
        "int_latency": {...}, "outbuf_latency": {...}, "throttle": {...}, ...}, ...},
     "topics": {"orders": {"partitions": {"0": {"partition": 0, "leader": 2,
        "fetch_state": "active", "app_offset": 312, "committed_offset": 312,
        "lo_offset": 0, "hi_offset": 312, "consumer_lag": 0, ...}, "-1": {...}}}},
     "cgrp": {"state": "up", "join_state": "steady", "rebalance_cnt": 1,
        "rebalance_reason": "Metadata for subscribed topic(s) has changed",
        "assignment_size": 3}}

One payload gives one record per scope, all of the same shape (the ``scope`` column says
which columns apply): ``client`` (queue depth and message totals), ``broker`` (one per
real broker: latency windows converted from microseconds to ms, throttle is already ms),
``partition`` (one per topic-partition; partition -1 is librdkafka's internal
unassigned-messages partition and is left out) and ``group`` (consumers in a group).

Two facts that differ from a first reading of the format: ``ts`` is librdkafka's
*monotonic* clock in microseconds, not wall time, so the event time is ``time`` (wall
clock, whole seconds) unless the caller passes the time the callback ran; and logical
offsets (-1001 INVALID, -1 for unknown lag) become null.

Returns the list of records, or `Malformed` (truncated_json, invalid_json, not_utf8,
oversize_number: an integer of more digits than Python converts, bad_escape: a string
escape that is no Unicode text, a lone surrogate such as ``"\\ud800"``, missing_field:<key>,
wrong_type:<key>: also a number that is not finite, NaN, Infinity, 1e999, nested_too_deep,
unknown_client_type, and the name of the client_stats check a value would break:
implausible_event_time, negative_count:<column>, out_of_range:<column>, ...;
schemas/plausible.py).
"""

from __future__ import annotations

import json
import math

from ingest.malformed import Malformed, checked_text, json_error_reason
from schemas.client_stats import BOUNDS, CLIENT_TYPES, WIDTHS
from schemas.plausible import checker

SOURCE = "client_stats"
_broken_bound = checker(*BOUNDS, *WIDTHS)  # schemas/plausible.py
MAX_PAYLOAD_CHARS = 64 * 1024 * 1024

RECORD_FIELDS = (
    "cluster", "ts_ms", "client_id", "name", "type", "scope",
    "broker_name", "node_id", "broker_state",
    "rtt_p50_ms", "rtt_p99_ms", "rtt_avg_ms",
    "int_latency_p50_ms", "int_latency_p99_ms", "int_latency_avg_ms",
    "outbuf_latency_p50_ms", "outbuf_latency_p99_ms", "outbuf_latency_avg_ms",
    "throttle_avg_ms", "txerrs", "rxerrs", "req_timeouts",
    "topic", "partition", "leader", "fetch_state", "committed_offset", "stored_offset",
    "app_offset", "lo_offset", "hi_offset", "ls_offset", "consumer_lag", "consumer_lag_stored",
    "msgq_cnt", "txmsgs", "rxmsgs",
    "group_state", "join_state", "rebalance_cnt", "rebalance_reason", "assignment_size",
)

# Window name in the JSON -> column prefix; these windows hold microseconds.
MICROSECOND_WINDOWS = (("rtt", "rtt"), ("int_latency", "int_latency"),
                       ("outbuf_latency", "outbuf_latency"))
PARTITION_OFFSETS = ("committed_offset", "stored_offset", "app_offset", "lo_offset",
                     "hi_offset", "ls_offset")


class _Bad(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def parse_client_stats(payload: str | bytes, *, cluster: str,
                       ts_ms: int | None = None) -> list[dict] | Malformed:
    """One statistics JSON document -> records of scope client/broker/partition/group.

    `ts_ms` is the wall-clock time the callback ran; without it the payload's ``time``
    (whole seconds) is used.
    """
    checked = checked_text(payload, SOURCE, MAX_PAYLOAD_CHARS)
    if isinstance(checked, Malformed):
        return checked
    payload = checked[0]
    try:
        doc = json.loads(payload)
    except json.JSONDecodeError as e:
        return Malformed(SOURCE, json_error_reason(e, payload), payload)
    except RecursionError:  # nested deeper than the decoder recurses; librdkafka nests 4 levels
        return Malformed(SOURCE, "nested_too_deep", payload)
    except ValueError:  # an integer of more digits than Python converts
        return Malformed(SOURCE, "oversize_number", payload)
    if ("\\ud" in payload or "\\uD" in payload) and not _encodable(doc):
        return Malformed(SOURCE, "bad_escape", payload)  # a lone surrogate: no sink encodes it
    try:
        return flatten(doc, cluster=cluster, ts_ms=ts_ms)
    except _Bad as bad:
        return Malformed(SOURCE, bad.reason, payload, ts_ms)


def _encodable(doc) -> bool:
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _get(d: dict, key: str, types: tuple, required: bool = False):
    v = d.get(key)
    if v is None:
        if required:
            raise _Bad(f"missing_field:{key}")
        return None
    if not isinstance(v, types) or isinstance(v, bool) and bool not in types:
        raise _Bad(f"wrong_type:{key}")
    if isinstance(v, float) and not math.isfinite(v):  # NaN, Infinity, 1e999: no JSON for it
        raise _Bad(f"wrong_type:{key}")
    return v


def _dict(d: dict, key: str) -> dict:
    v = d.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _Bad(f"wrong_type:{key}")
    return v


def _int(d: dict, key: str) -> int | None:
    return _get(d, key, (int,))


def _known(v: int | None) -> int | None:
    """Logical offsets and "unknown" lags (all negative) as null."""
    return v if v is not None and v >= 0 else None


def _ms(window: dict, stat: str) -> float | None:
    v = _get(window, stat, (int, float))
    return v / 1000.0 if v is not None else None


def flatten(doc, *, cluster: str, ts_ms: int | None = None) -> list[dict]:
    """Records from an already decoded statistics document (raises _Bad)."""
    if not isinstance(doc, dict):
        raise _Bad("wrong_type:statistics")
    name = _get(doc, "name", (str,), required=True)
    client_type = _get(doc, "type", (str,), required=True)
    if client_type not in CLIENT_TYPES:
        raise _Bad("unknown_client_type")
    wall = _get(doc, "time", (int, float), required=ts_ms is None)
    base = dict.fromkeys(RECORD_FIELDS)
    base.update(cluster=cluster, ts_ms=ts_ms if ts_ms is not None else int(wall * 1000),
                client_id=_get(doc, "client_id", (str,)), name=name, type=client_type)

    records = [{**base, "scope": "client", "msgq_cnt": _int(doc, "msg_cnt"),
                "txmsgs": _int(doc, "txmsgs"), "rxmsgs": _int(doc, "rxmsgs")}]
    records.extend(_broker_records(_dict(doc, "brokers"), base))
    records.extend(_partition_records(_dict(doc, "topics"), base))
    cgrp = _dict(doc, "cgrp")
    if cgrp:
        records.append({**base, "scope": "group", "group_state": _get(cgrp, "state", (str,)),
                        "join_state": _get(cgrp, "join_state", (str,)),
                        "rebalance_cnt": _int(cgrp, "rebalance_cnt"),
                        "rebalance_reason": _get(cgrp, "rebalance_reason", (str,)),
                        "assignment_size": _int(cgrp, "assignment_size")})
    for rec in records:
        reason = _broken_bound(rec)
        if reason is not None:
            raise _Bad(reason)
    return records


def _broker_records(brokers: dict, base: dict) -> list[dict]:
    out = []
    for key, b in brokers.items():
        if not isinstance(b, dict):
            raise _Bad("wrong_type:brokers")
        node_id = _int(b, "nodeid")
        if node_id is None or node_id < 0:
            continue  # bootstrap and logical (coordinator) entries, not a real broker
        rec = {**base, "scope": "broker", "broker_name": _get(b, "name", (str,)) or key,
               "node_id": node_id, "broker_state": _get(b, "state", (str,)),
               "txerrs": _int(b, "txerrs"), "rxerrs": _int(b, "rxerrs"),
               "req_timeouts": _int(b, "req_timeouts")}
        for window, prefix in MICROSECOND_WINDOWS:
            w = _dict(b, window)
            rec[f"{prefix}_p50_ms"] = _ms(w, "p50")
            rec[f"{prefix}_p99_ms"] = _ms(w, "p99")
            rec[f"{prefix}_avg_ms"] = _ms(w, "avg")
        throttle = _get(_dict(b, "throttle"), "avg", (int, float))
        rec["throttle_avg_ms"] = float(throttle) if throttle is not None else None
        out.append(rec)
    return out


def _partition_records(topics: dict, base: dict) -> list[dict]:
    out = []
    for topic_name, t in topics.items():
        if not isinstance(t, dict):
            raise _Bad("wrong_type:topics")
        for key, p in _dict(t, "partitions").items():
            if not isinstance(p, dict):
                raise _Bad("wrong_type:partitions")
            partition = _int(p, "partition")
            if partition is None:
                try:
                    partition = int(key)
                except ValueError:
                    raise _Bad("wrong_type:partition") from None
            if partition < 0:
                continue  # -1: librdkafka's internal partition for unassigned messages
            rec = {**base, "scope": "partition", "topic": _get(t, "topic", (str,)) or topic_name,
                   "partition": partition, "leader": _known(_int(p, "leader")),
                   "fetch_state": _get(p, "fetch_state", (str,)),
                   "consumer_lag": _known(_int(p, "consumer_lag")),
                   "consumer_lag_stored": _known(_int(p, "consumer_lag_stored")),
                   "msgq_cnt": _int(p, "msgq_cnt"), "txmsgs": _int(p, "txmsgs"),
                   "rxmsgs": _int(p, "rxmsgs")}
            for col in PARTITION_OFFSETS:
                rec[col] = _known(_int(p, col))
            out.append(rec)
    return out
