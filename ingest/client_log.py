"""Pick consumer offset resets, out-of-range fetches and truncations out of client logs.

Client applications log in their own layouts, so this parser looks for the known messages
anywhere in a line and takes the time from the line when it has one (Kafka's own layout
``[%d] %p %m (%c)``, any ``yyyy-MM-dd HH:mm:ss,SSS`` stamp, or librdkafka's stderr
``%4|<epoch seconds.millis>|``), else from the caller.
Lines that are none of these are skipped with a `Skipped` (reason ``not_offset_event``):
most of a client log is unrelated to offsets.

Java consumer (kafka-clients 4.3.1, captured; ``[Consumer clientId=c, groupId=g]`` prefix):

    [2026-11-22 10:39:56,390] INFO [Consumer clientId=java-unclean-group-client,
    groupId=java-unclean-group] Resetting offset for partition unclean-t-0 to position
    FetchPosition{offset=0, offsetEpoch=Optional.empty, currentLeader=LeaderAndEpoch{...}}.
    (org.apache.kafka.clients.consumer.internals.SubscriptionState)

- ``Resetting offset for partition <t>-<p> to position FetchPosition{offset=N, ...}.``
  (3.x+), ``Resetting offset for partition <t>-<p> to offset N.`` (older): offset_reset;
- ``Fetch position FetchPosition{offset=N, ...} is out of range for partition <t>-<p>,
  resetting offset`` (``Fetch offset N is ...`` before 3.0): offset_out_of_range;
- ``Truncation detected for partition <t>-<p> at offset FetchPosition{offset=200, ...},
  resetting offset to the first offset known to diverge FetchPosition{offset=100, ...}``
  (4.3.1, captured; TELEMETRY.md's ``at offset N, resetting offset`` form is matched too):
  truncation_detected;
- ``Seeking to EARLIEST offset of partition <t>-<p>`` / ``Seeking to offset N for partition
  <t>-<p>``: an offset_reset the application asked for (an operator or a replay).

librdkafka (facility OFFSET, logged at warning level when an error caused the reset;
rdkafka_offset.c ``rd_kafka_offset_reset``, format ``%s [%d]: offset reset (at %s, broker
%d) to %s%s: %s: %s``):

    unclean-t [0]: offset reset (at offset 200 (leader epoch 0), broker 2) to offset
    BEGINNING (leader epoch -1): fetch failed due to requested offset not available on the
    broker: Broker: Offset out of range

The target reads ``offset BEGINNING`` / ``END`` / ``STORED`` / ``INVALID``, a number, or
``cached BEGINNING offset offset 500 (leader epoch -1)``. The kind follows the cause:
offset_out_of_range when the reason says so, truncation_detected for log truncation,
offset_reset otherwise. librdkafka lines carry no group id and the client id only as the
handle name (``<client.id>#consumer-N``): the caller passes what it knows.

Malformed reasons: not_utf8, empty_line, oversize_line, bad_timestamp, missing_field:ts_ms,
oversize_number (a number of more digits than Python converts), and the name of the
client_offset_events check a value would break (negative_partition,
implausible_event_time, negative_offset:<column>, out_of_range:<column>, ...;
schemas/plausible.py).
"""

from __future__ import annotations

import re
from datetime import tzinfo

from ingest.log_time import STAMP_RE, UTC, stamp_to_ms
from ingest.malformed import Malformed, Skipped, checked_text
from schemas.client_offset_events import BOUNDS, WIDTHS
from schemas.plausible import checker

SOURCE = "client_log"
_broken_bound = checker(*BOUNDS, *WIDTHS)  # schemas/plausible.py
MAX_LINE_CHARS = 64 * 1024
MAX_REASON_CHARS = 512

KINDS = ("offset_reset", "offset_out_of_range", "truncation_detected")
RESET_TARGETS = ("earliest", "latest", "stored", "explicit")

RECORD_FIELDS = (
    "cluster", "ts_ms", "client_id", "group_id", "topic", "partition", "kind", "from_offset",
    "to_offset", "leader_epoch", "broker", "reset_target", "reason", "client_software",
)

TP = r"(?P<tp>[A-Za-z0-9._-]+-\d+)"


def _position(name: str) -> str:
    """An offset written plain (older clients) or as FetchPosition{offset=N, ...}."""
    return r"(?:FetchPosition\{offset=)?(?P<" + name + r">-?\d+)"


KAFKA_LAYOUT_RE = re.compile(r"\[(" + STAMP_RE.pattern + r")\] [A-Z]+ ")
ISO_STAMP_RE = re.compile(STAMP_RE.pattern)
RDKAFKA_STDERR_RE = re.compile(r"%\d\|(\d+)\.(\d{3})\|")  # %4|1795344630.140|OFFSET|...
JAVA_CONTEXT_RE = re.compile(r"\[Consumer (?:instanceId=[^,\]]*, )?clientId=(?P<client>[^,\]]*), "
                             r"groupId=(?P<group>[^\]]*)\]")

JAVA_RESET_RE = re.compile(r"Resetting offset for partition " + TP + r" to "
                           r"(?:position FetchPosition\{offset=|offset )(?P<to>-?\d+)")
JAVA_OUT_OF_RANGE_RE = re.compile(r"Fetch (?:position|offset) " + _position("from") +
                                  r".*? is out of range for partition " + TP)
JAVA_TRUNCATION_RE = re.compile(
    r"Truncation detected for partition " + TP + r" at offset " + _position("from") +
    r"(?:.*?first offset known to diverge " + _position("to") + r")?")
JAVA_SEEK_STRATEGY_RE = re.compile(r"Seeking to (?P<strategy>[A-Za-z_]+) offset of partition " + TP)
JAVA_SEEK_OFFSET_RE = re.compile(r"Seeking to offset (?P<to>-?\d+) for partition " + TP)
OFFSET_EPOCH_RE = re.compile(r"offsetEpoch=Optional\[(?P<e>-?\d+)\]")

RDKAFKA_RESET_RE = re.compile(
    r"(?P<topic>[A-Za-z0-9._-]+) \[(?P<p>\d+)\]: offset reset "
    r"\(at (?:offset )?(?P<from>-?\d+|[A-Z]+)(?: \(leader epoch (?P<epoch>-?\d+)\))?, "
    r"broker (?P<broker>-?\d+)\) to (?P<cached>cached (?P<cached_what>[A-Z]+) offset )?"
    r"(?:offset )?(?P<target>-?\d+|[A-Z]+(?:\(-?\d+\))?)"
    r"(?: \(leader epoch -?\d+\))?(?:: (?P<reason>.*))?$")
RDKAFKA_HANDLE_RE = re.compile(r"[\[|](?P<client>[^\[\]|#\s]*)#consumer-\d+[\]|]")

JAVA_STRATEGIES = {"EARLIEST": "earliest", "LATEST": "latest", "earliest": "earliest",
                   "latest": "latest"}
RDKAFKA_TARGETS = {"BEGINNING": "earliest", "END": "latest", "STORED": "stored"}


def parse_client_line(line: str | bytes, *, cluster: str, client_id: str | None = None,
                      group_id: str | None = None, client_software: str | None = None,
                      ts_ms: int | None = None, tz: tzinfo = UTC
                      ) -> dict | Malformed | Skipped:
    """One client log line -> a client_offset_events record, Skipped, or Malformed.

    `client_id`, `group_id` and `client_software` describe the application whose log this
    is (lines that name them win); `ts_ms` is the time to use when the line has no stamp.
    """
    checked = checked_text(line, SOURCE, MAX_LINE_CHARS)
    if isinstance(checked, Malformed):
        return checked
    line, text = checked
    if "offset" not in text:  # every message below says "offset": skip the rest cheaply
        return Skipped(SOURCE, "not_offset_event")
    try:
        rec = _java_event(text) or _rdkafka_event(text)
    except ValueError:  # int() of more digits than Python converts
        return Malformed(SOURCE, "oversize_number", line)
    if rec is None:
        return Skipped(SOURCE, "not_offset_event")
    stamp = KAFKA_LAYOUT_RE.match(text) or ISO_STAMP_RE.search(text)
    epoch = RDKAFKA_STDERR_RE.match(text) if stamp is None else None
    if epoch is not None:
        ts_ms = int(epoch.group(1)) * 1000 + int(epoch.group(2))
    elif stamp is not None:
        try:
            text_stamp = stamp.group(1) if stamp.re is KAFKA_LAYOUT_RE else stamp.group(0)
            ts_ms = stamp_to_ms(text_stamp, tz)
        except ValueError:
            return Malformed(SOURCE, "bad_timestamp", line)
    if ts_ms is None:
        return Malformed(SOURCE, "missing_field:ts_ms", line)
    out = dict.fromkeys(RECORD_FIELDS)
    out.update(cluster=cluster, ts_ms=ts_ms, client_id=client_id, group_id=group_id,
               client_software=client_software)
    out.update({k: v for k, v in rec.items() if v is not None})  # the line wins
    if out["partition"] < 0:
        return Malformed(SOURCE, "negative_partition", line, ts_ms)
    reason = _broken_bound(out)
    if reason is not None:
        return Malformed(SOURCE, reason, line, ts_ms)
    return out


def _split_tp(tp: str) -> tuple[str, int]:
    topic, _, partition = tp.rpartition("-")
    return topic, int(partition)


def _java_event(text: str) -> dict | None:
    rec: dict | None = None
    if m := JAVA_TRUNCATION_RE.search(text):
        to = m.group("to")
        rec = {"kind": "truncation_detected", "from_offset": int(m.group("from")),
               "to_offset": int(to) if to is not None else None,
               "reset_target": "explicit" if to is not None else None}
    elif m := JAVA_OUT_OF_RANGE_RE.search(text):
        rec = {"kind": "offset_out_of_range", "from_offset": int(m.group("from"))}
    elif m := JAVA_RESET_RE.search(text):
        rec = {"kind": "offset_reset", "to_offset": int(m.group("to"))}
    elif m := JAVA_SEEK_OFFSET_RE.search(text):
        rec = {"kind": "offset_reset", "to_offset": int(m.group("to")), "reset_target": "explicit",
               "reason": "seek"}
    elif m := JAVA_SEEK_STRATEGY_RE.search(text):
        rec = {"kind": "offset_reset", "reset_target": JAVA_STRATEGIES.get(m.group("strategy")),
               "reason": "seek"}
    if rec is None:
        return None
    rec["topic"], rec["partition"] = _split_tp(m.group("tp"))
    if epoch := OFFSET_EPOCH_RE.search(text):
        rec["leader_epoch"] = int(epoch.group("e"))
    if ctx := JAVA_CONTEXT_RE.search(text):
        rec["client_id"], rec["group_id"] = ctx.group("client"), ctx.group("group")
        rec["client_software"] = "apache-kafka-java"
    return rec


def _rdkafka_event(text: str) -> dict | None:
    m = RDKAFKA_RESET_RE.search(text)
    if m is None:
        return None
    reason = m.group("reason")
    lowered = (reason or "").lower()
    if "truncation" in lowered:
        kind = "truncation_detected"
    elif "out of range" in lowered:
        kind = "offset_out_of_range"
    else:
        kind = "offset_reset"
    target = m.group("target")
    if m.group("cached"):
        # "cached BEGINNING offset offset 500": the cached log start (or end) offset
        reset_target = RDKAFKA_TARGETS.get(m.group("cached_what"))
        to_offset = int(target) if target.lstrip("-").isdigit() else None
    elif target.lstrip("-").isdigit():
        reset_target, to_offset = "explicit", int(target)
    elif target.startswith("TAIL"):
        reset_target, to_offset = "latest", None
    else:
        reset_target, to_offset = RDKAFKA_TARGETS.get(target), None
    from_text = m.group("from")
    rec = {
        "kind": kind,
        "topic": m.group("topic"),
        "partition": int(m.group("p")),
        "from_offset": int(from_text) if from_text.lstrip("-").isdigit() else None,
        "to_offset": to_offset,
        "leader_epoch": int(m.group("epoch")) if m.group("epoch") is not None else None,
        "broker": int(m.group("broker")),
        "reset_target": reset_target,
        "reason": reason[:MAX_REASON_CHARS] if reason else None,
        "client_software": "librdkafka",
    }
    if handle := RDKAFKA_HANDLE_RE.search(text):
        rec["client_id"] = handle.group("client") or None
    return rec
