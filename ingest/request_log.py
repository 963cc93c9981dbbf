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

(one line in the file). Up to 2.7 it was text (request_log_text).

This module reads the line's frame (timestamp, level, ``Completed request:``) and hands
the message to one of three paths, each in its own module:

- request_log_fast: a string scan of the JSON message, no full decode (the speed of the
  pipeline rests on it); returns None for anything it does not expect.
- request_log_json: the full decode it falls back to, which names what is wrong; tests
  check that both give the same record on every captured line.
- request_log_text: the pre-2.8 text message.

request_log_record holds what they share: the record's columns and the steps that derive
the same facts on every path.

Each line gives a record (a dict with the columns of schemas/request_stages.py) or a
`Malformed` with a reason: empty_line, oversize_line, not_utf8, not_request_line,
bad_timestamp, truncated_json, invalid_json, bad_escape:<key>, oversize_number,
nested_too_deep, missing_field:<key>, wrong_type:<key>, negative_time:<key>, unknown_api,
api_mismatch, bad_connection, and the name of the request_stages check a value would break
(implausible_event_time, time_over_a_day:<column>, stage_over_total:<column>,
out_of_range:<column>, ...: schemas/plausible.py); never an exception, whatever the line
holds. ``bad_escape:<key>`` is a string value (the principal, the listener, the client id
or software, a topic name ...) with an escape JSON does not have (``"\\q"``) or one that is no Unicode text (a lone
surrogate such as ``"\\ud800"``, which no sink could encode); ``<key>`` is the JSON key
it is the value of. ``oversize_number`` is a number of more digits than Python converts
(`sys.get_int_max_str_digits`). A timing that is not a finite number (NaN, Infinity,
1e999) is ``wrong_type:<key>``.
"""

from __future__ import annotations

import re
from datetime import tzinfo

from ingest.log_time import STAMP_RE, UTC, stamp_to_ms
from ingest.malformed import Malformed, checked_text
from ingest.request_log_fast import parse_json_message_fast
from ingest.request_log_json import TIMINGS, parse_json_message
from ingest.request_log_record import (MAX_COMMITTED, MAX_ERROR_CODES, MAX_TOPICS,
                                       RECORD_FIELDS, BadLine, implausible, split_connection)
from ingest.request_log_text import LEGACY_TIMINGS, parse_legacy_message

__all__ = [
    "CONTROLLER_LISTENERS", "LEGACY_TIMINGS", "LINE_RE", "MAX_COMMITTED", "MAX_ERROR_CODES",
    "MAX_LINE_CHARS",
    "MAX_TOPICS", "RECORD_FIELDS", "SOURCE", "TIMINGS", "parse_json_message",
    "parse_json_message_fast", "parse_legacy_message", "parse_request_line",
    "split_connection",
]

SOURCE = "request_log"

# A line longer than this is quarantined unread. Metadata responses of very large clusters
# are the longest legitimate lines; raise it if those are quarantined as oversize.
MAX_LINE_CHARS = 8 * 1024 * 1024
CONTROLLER_LISTENERS = frozenset({"CONTROLLER"})

LINE_RE = re.compile(r"\[(" + STAMP_RE.pattern + r")\] ([A-Z]+) Completed request:")


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
                if rec is not None and implausible(rec) is None:
                    return rec
                # An implausible value falls back too: the full decode reads the body
                # facts the fast path only searched for, and says what is wrong.
            rec = parse_json_message(message)
        elif message.lstrip().startswith("RequestHeader("):
            try:
                rec = parse_legacy_message(message.lstrip())
            except ValueError:  # int() of more digits than Python converts
                raise BadLine("oversize_number") from None
        else:
            raise BadLine("not_request_line")
    except BadLine as bad:
        return Malformed(SOURCE, bad.reason, line, ts_ms)
    rec["cluster"] = cluster
    rec["broker"] = broker
    rec["ts_ms"] = ts_ms
    rec["is_controller_traffic"] = rec["listener"] in controller_listeners
    reason = implausible(rec)
    if reason is not None:
        return Malformed(SOURCE, reason, line, ts_ms)
    return {k: rec[k] for k in RECORD_FIELDS}
