"""Parse Kafka broker logs (server, controller, state-change, log-cleaner) into `log_events`.

Every broker log uses the layout ``[%d] %p %m (%c)``. Most events are one line:

    [2026-11-22 10:39:32,662] INFO [Partition orders-0 broker=2] Shrinking ISR from 3,2,1 to
    1,2. Leader: (highWatermark: 364, endOffset: 390). Out of sync replicas: (brokerId: 3,
    endOffset: 364, lastCaughtUpTimeMs: 1795343968925). (kafka.cluster.Partition)

(one line in the file). Some span several lines: the lines that do not start with a
``[yyyy-MM-dd HH:mm:ss,SSS]`` stamp belong to the event before them, such as a stack trace
or the log cleaner's summary, whose logger name closes the last line (Kafka 4.3.1):

    [2026-11-22 10:39:21,624] INFO [kafka-log-cleaner-thread-0]:
    \tLog cleaner thread 0 cleaned log compacted-keys-0 (dirty section = [0, 800])
    \t0.1 MB of log processed in 0.2 seconds (0.4 MB/sec).
    ...
    \t97.4% size reduction (97.5% fewer messages)
     (org.apache.kafka.storage.internals.log.LogCleaner$CleanerThread)

`EventAssembler` turns lines into whole events; `parse_event` turns one event into a record
whose ``kind`` (schemas.log_events.LogEventKind) says what happened, with typed columns
for the kinds kmon acts on. Each line form matched, and where it was seen:

- unclean_election: ``UNCLEAN partition change for <t>-<p> with topic ID <id>: isr: [1] ->
  [2], leader: 1 -> 2, ..., leaderEpoch: 0 -> 1, ...`` (controller, 3.3+; seen on 4.3.1,
  logged by every controller as it replays the change); ``Setting new leader for topicId
  <id>, partition <p> to <b> using an unclean election[. Previous partition: ...]`` (3.7+,
  seen on 4.3.1 on the active controller); ``[QuorumController id=N] Triggering unclean
  leader election for offline partition <t>-<p>.`` (from TELEMETRY.md, not seen). The
  first two (4.x, with eligible leader replicas) also name the partition's last known
  ELR before the change (``lastKnownElr: [2] -> []``; ``lastKnownElr=[2]`` in the previous
  registration): `last_known_elr`, the replicas still in sync when its ISR emptied.
- truncation: ``[UnifiedLog partition=<t>-<p>, dir=<d>] Truncating to offset N`` (``[Log``
  before 3.0); ``Truncating partition <t>-<p> with TruncationState(offset=N, completed=true)
  due to ...``; WARN ``Truncating <t>-<p> to offset N below high watermark M``; 2.x
  ``Truncating partition <t>-<p> to local high watermark N``. "Truncating to N has no
  effect" is kept as other.
- isr_shrink: ``[Partition <t>-<p> broker=N] Shrinking ISR from 1,2,3 to 1,2. Leader:
  (highWatermark: H, ...`` (also the 1.x form ``Partition [t,p] on broker N: Shrinking ...``).
- isr_expand: ``Expanding ISR from 1,2 to 1,2,3`` (ZooKeeper-era brokers only).
- isr_update: ``ISR updated to 3,2,1  and version updated to 2`` (KRaft, 4.3.1 included,
  logs no expand line: this line follows every accepted ISR change, either direction; two
  spaces, or ``(under-min-isr)`` between them; ``zkVersion updated to [N]`` in 2.x).
- leader_change: state-change.log ``[Broker id=N] Leader <t>-<p> with topic id Some(<id>)
  starts at leader epoch E from offset O with partition epoch P, high watermark H, ISR
  [1,2,3], ... Previous leader Some(2) and previous leader epoch was E0.`` and ``Follower
  <t>-<p> starts at leader epoch E from offset O with partition epoch P and high watermark
  H. Current leader is L. Previous leader Some(2) ...`` (both seen on 4.3.1).
- offset_out_of_range / offset_reset (followers): ``Current offset N for partition <t>-<p>
  is out of range, which typically implies a leader change. Reset fetch offset to M``;
  ``Reset fetch offset for partition <t>-<p> from N to current leader's latest offset M``.
- coordinator_load / coordinator_unload: this broker became (or stopped being) the group
  coordinator of a __consumer_offsets partition: ``[GroupCoordinator id=1] Scheduling
  loading of metadata from __consumer_offsets-9 with epoch 1`` and ``Scheduling unloading
  of metadata for __consumer_offsets-7 with epoch OptionalInt[1]`` (CoordinatorRuntime,
  seen on 4.3.1; the epoch is the partition's leader epoch, 0 for the first leader, and
  ``OptionalInt.empty`` when the topic was deleted); ``Scheduling loading of offsets and
  group metadata from __consumer_offsets-7[ for epoch 3]`` (GroupMetadataManager, before
  4.0; the epoch from 2.2). topic is __consumer_offsets, partition the groups' partition,
  leader_epoch the epoch when given. The share and transaction coordinators' lines (other
  topics) stay other. The offset-rewind detector claims a coordinator move only with one.
- broker_fenced / broker_shutdown / broker_registered / broker_unfenced (controller,
  subject_broker the broker the line is about): ``[QuorumController id=3] Fencing broker 2
  at epoch 11 because its session has timed out.`` (4.x; ``Fencing broker 2 because ...``
  before); ``Unfenced broker 1 has requested and been granted a controlled shutdown.``;
  ``Registering a new incarnation of broker 2. Previous incarnation ID was ...``; ``The
  request from broker 2 to unfence has been granted because it has caught up with the
  offset of its register broker record 4822.`` (``... with the last committed metadata
  offset N`` in 3.x). All seen on 4.3.1 except the 3.x forms. When a broker was out.
  A broker also says it is going: broker_shutdown from its own ``[BrokerServer id=3]
  Transition from STARTED to SHUTTING_DOWN`` (seen on 4.3.1; subject_broker the broker
  itself), the only line of it when the controller is on the broker going.
- broker_unreachable (subject_broker the broker that cannot be reached): a replica fetcher
  of this broker could not connect to the leader it follows: ``[ReplicaFetcher
  replicaId=1, leaderId=3, fetcherId=0] Connection to node 3 (/127.0.0.1:38101) could not
  be established. Node may not be available.`` (NetworkClient, seen on 4.3.1, repeated at
  each reconnect attempt while the broker's port refuses; ``Broker may not be available``
  before 3.0). The other brokers' view of a broker that is gone, also while the only
  controller is the one gone and nobody logs its fencing.
- cleaner_run: the summary above; sizes are MB with one decimal and counts carry
  thousands separators (``%,.1f``, ``%,d`` in the en locale).

An event becomes a record or a `Malformed` (not_utf8, empty_line, orphan_lines: text
before the first stamped line, bad_timestamp, oversize_number: a number of more digits
than Python converts, or the name of the log_events check a value would break:
unknown_level, negative_offset:<column>, out_of_range:<column>, ...; schemas/plausible.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import tzinfo

from ingest.log_time import STAMP_RE, UTC, stamp_to_ms
from ingest.malformed import Malformed
from schemas.log_events import BOUNDS, LEVELS, WIDTHS, LogEventKind
from schemas.plausible import checker

SOURCE = "broker_log"
_broken_bound = checker(*BOUNDS, *WIDTHS)  # schemas/plausible.py

MAX_MESSAGE_CHARS = 8 * 1024
# The assembler stops collecting an event's lines past this size (a runaway stack trace);
# what it kept is still more than the message bound.
MAX_EVENT_CHARS = 64 * 1024

HEADER_RE = re.compile(r"\[(" + STAMP_RE.pattern + r")\] ([A-Z]+) ")
LOGGER_SUFFIX_RE = re.compile(r" ?\(([A-Za-z_$][\w$.-]*)\)\s*$")

TP = r"(?P<tp>[A-Za-z0-9._-]+-\d+)"
INTS = r"[\d, ]*"

RECORD_FIELDS = (
    "cluster", "broker", "ts_ms", "log", "level", "logger", "message", "message_truncated",
    "kind", "topic", "partition", "topic_id", "offset", "from_offset", "high_watermark",
    "old_leader", "new_leader", "leader_epoch", "isr_before", "isr_after", "dirty_start",
    "dirty_end", "mb_processed", "seconds", "start_size_mb", "end_size_mb", "start_messages",
    "end_messages", "reduction_pct", "buffer_utilization_pct", "subject_broker",
    "last_known_elr",
)


# ---- assembling lines into events --------------------------------------------------------

class EventAssembler:
    """Collects log lines into whole events: a stamped line and the lines that follow it.

    Feed lines in file order; each call yields the events the line completed (the one
    before it, once a new stamped line arrives). `flush` yields the last one, at the end
    of a file or when the agent has waited long enough for more lines.
    """

    def __init__(self, max_event_chars: int = MAX_EVENT_CHARS):
        self.max_event_chars = max_event_chars
        self._lines: list[str] = []
        self._size = 0

    def feed(self, line: str | bytes) -> Iterator[str | Malformed]:
        if isinstance(line, (bytes, bytearray)):
            try:
                line = bytes(line).decode("utf-8")
            except UnicodeDecodeError:
                yield Malformed(SOURCE, "not_utf8", bytes(line))
                return
        line = line.rstrip("\r\n")
        if HEADER_RE.match(line):
            yield from self.flush()
        if self._size <= self.max_event_chars:
            line = line[:self.max_event_chars]
            self._lines.append(line)
            self._size += len(line) + 1

    def feed_all(self, lines: Iterable[str | bytes]) -> Iterator[str | Malformed]:
        for line in lines:
            yield from self.feed(line)
        yield from self.flush()

    def flush(self) -> Iterator[str]:
        if self._lines:
            event = "\n".join(self._lines)
            self._lines, self._size = [], 0
            yield event


# ---- one event into a record -------------------------------------------------------------

def parse_event(event: str, *, cluster: str, broker: int, log: str | None = None,
                tz: tzinfo = UTC) -> dict | Malformed:
    """One whole event (lines joined with newlines) -> a log_events record, or Malformed."""
    if not event.strip():
        return Malformed(SOURCE, "empty_line", event)
    head = HEADER_RE.match(event)
    if head is None:
        return Malformed(SOURCE, "orphan_lines", event)
    try:
        ts_ms = stamp_to_ms(head.group(1), tz)
    except ValueError:
        return Malformed(SOURCE, "bad_timestamp", event)
    body = event[head.end():]
    logger, message = split_logger(body)
    rec = dict.fromkeys(RECORD_FIELDS)
    rec.update(cluster=cluster, broker=broker, ts_ms=ts_ms, log=log, level=head.group(2),
               logger=logger, message=message[:MAX_MESSAGE_CHARS],
               message_truncated=len(message) > MAX_MESSAGE_CHARS,
               kind=LogEventKind.OTHER.value)
    try:
        classify(message, rec)
    except ValueError:  # int() of more digits than Python converts
        return Malformed(SOURCE, "oversize_number", event, ts_ms)
    reason = implausible(rec)
    if reason is not None:
        return Malformed(SOURCE, reason, event, ts_ms)
    return rec


def implausible(rec: dict) -> str | None:
    """What in a built record cannot be true, as the log_events check it breaks (a level
    log4j does not have, a negative offset or node id, a number wider than its field:
    schemas/plausible.py), or None."""
    if rec["level"] not in LEVELS:
        return "unknown_level"
    if rec["broker"] < 0:
        return "negative_broker"
    if rec["partition"] is not None and rec["partition"] < 0:
        return "negative_partition"
    reason = _broken_bound(rec)
    if reason is not None:
        return reason
    if rec["dirty_start"] is not None and rec["dirty_end"] is not None \
            and rec["dirty_start"] > rec["dirty_end"]:
        return "dirty_end_before_start"
    return None


def split_logger(body: str) -> tuple[str | None, str]:
    """(logger, message): the ``(%c)`` that closes a line, and the text without it.

    It closes the first line of an event, or the last one for multi-line messages (the
    cleaner summary); a stack trace follows the line it closes. Stack frames end in
    ``(File.java:12)`` or ``(Native Method)``, which the logger pattern never matches.
    """
    lines = body.split("\n")
    for i, line in enumerate(lines):
        m = LOGGER_SUFFIX_RE.search(line)
        if m:
            lines[i] = line[:m.start()]
            if i == len(lines) - 1 and not lines[i].strip() and i > 0:
                lines.pop()  # the cleaner's closing line held nothing but the logger
            return m.group(1), "\n".join(lines)
    return None, body


def classify(message: str, rec: dict) -> None:
    """Set kind and the typed fields of `rec` from the message (first matching rule wins)."""
    for keyword, rule in RULES:
        if keyword in message and rule(message, rec):
            return


def _set_tp(rec: dict, tp: str) -> None:
    topic, _, partition = tp.rpartition("-")
    rec["topic"], rec["partition"] = topic, int(partition)


def _ints(text: str | None) -> list[int] | None:
    if text is None:
        return None
    return [int(x) for x in re.split(r"[,\s]+", text.strip()) if x]


def _num(text: str | None) -> float | None:
    """A Java-formatted number ("1,234.5", "NaN", "Infinity") as a float, None if not finite."""
    if text is None:
        return None
    try:
        v = float(text.replace(",", ""))
    except ValueError:
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def _count(text: str | None) -> int | None:
    return int(text.replace(",", "")) if text is not None else None


# unclean elections

UNCLEAN_CHANGE_RE = re.compile(r"UNCLEAN partition change for " + TP +
                               r" with topic ID (?P<tid>[^:\s]+): (?P<changes>.*)")
ISR_CHANGE_RE = re.compile(r"\bisr: \[(?P<a>" + INTS + r")\] -> \[(?P<b>" + INTS + r")\]")
LEADER_CHANGE_RE = re.compile(r"\bleader: (?P<a>-?\d+) -> (?P<b>-?\d+)")
EPOCH_CHANGE_RE = re.compile(r"\bleaderEpoch: (?P<a>-?\d+) -> (?P<b>-?\d+)")
LAST_KNOWN_ELR_CHANGE_RE = re.compile(r"\blastKnownElr: \[(?P<a>" + INTS + r")\] -> \[")
UNCLEAN_SETTING_RE = re.compile(r"Setting new leader for topicId (?P<tid>[^,\s]+), partition "
                                r"(?P<p>\d+) to (?P<leader>-?\d+) using an unclean election")
PREVIOUS_ISR_RE = re.compile(r"Previous partition: PartitionRegistration\(.*?\bisr=\[(?P<isr>" +
                             INTS + r")\].*?\bleader=(?P<leader>-?\d+)")
PREVIOUS_LAST_KNOWN_ELR_RE = re.compile(r"Previous partition: PartitionRegistration\(.*?"
                                        r"\blastKnownElr=\[(?P<elr>" + INTS + r")\]")
UNCLEAN_TRIGGER_RE = re.compile(r"Triggering unclean leader election for offline partition " + TP)


def _unclean_change(message: str, rec: dict) -> bool:
    m = UNCLEAN_CHANGE_RE.search(message)
    if m is None:
        return False
    _set_tp(rec, m.group("tp"))
    rec["topic_id"] = m.group("tid")
    changes = m.group("changes")
    if isr := ISR_CHANGE_RE.search(changes):
        rec["isr_before"], rec["isr_after"] = _ints(isr.group("a")), _ints(isr.group("b"))
    if leader := LEADER_CHANGE_RE.search(changes):
        rec["old_leader"], rec["new_leader"] = int(leader.group("a")), int(leader.group("b"))
    if epoch := EPOCH_CHANGE_RE.search(changes):
        rec["leader_epoch"] = int(epoch.group("b"))
    if elr := LAST_KNOWN_ELR_CHANGE_RE.search(changes):
        rec["last_known_elr"] = _ints(elr.group("a"))
    rec["kind"] = LogEventKind.UNCLEAN_ELECTION.value
    return True


def _unclean_setting(message: str, rec: dict) -> bool:
    m = UNCLEAN_SETTING_RE.search(message)
    if m is None:
        return False
    rec["topic_id"], rec["partition"] = m.group("tid"), int(m.group("p"))
    rec["new_leader"] = int(m.group("leader"))
    if prev := PREVIOUS_ISR_RE.search(message):
        rec["isr_before"], rec["old_leader"] = _ints(prev.group("isr")), int(prev.group("leader"))
    if elr := PREVIOUS_LAST_KNOWN_ELR_RE.search(message):
        rec["last_known_elr"] = _ints(elr.group("elr"))
    rec["kind"] = LogEventKind.UNCLEAN_ELECTION.value
    return True


def _unclean_trigger(message: str, rec: dict) -> bool:
    m = UNCLEAN_TRIGGER_RE.search(message)
    if m is None:
        return False
    _set_tp(rec, m.group("tp"))
    rec["kind"] = LogEventKind.UNCLEAN_ELECTION.value
    return True


# truncation

TRUNC_BELOW_HW_RE = re.compile(r"Truncating " + TP + r" to offset (?P<off>\d+) below high "
                               r"watermark (?P<hw>\d+)")
TRUNC_STATE_RE = re.compile(r"Truncating partition " + TP +
                            r" with TruncationState\(offset=(?P<off>\d+)")
TRUNC_LOG_RE = re.compile(r"\[(?:UnifiedLog|Log) partition=" + TP + r", dir=[^\]]*\] "
                          r"Truncating to (?:offset )?(?P<off>\d+)(?P<noop> has no effect)?")
TRUNC_LEGACY_RE = re.compile(r"Truncating partition " + TP +
                             r" to (?:local high watermark |offset )?(?P<off>\d+)")


def _truncation(message: str, rec: dict) -> bool:
    for rx in (TRUNC_BELOW_HW_RE, TRUNC_STATE_RE, TRUNC_LOG_RE, TRUNC_LEGACY_RE):
        m = rx.search(message)
        if m is None:
            continue
        _set_tp(rec, m.group("tp"))
        rec["offset"] = int(m.group("off"))
        if "hw" in rx.groupindex:
            rec["high_watermark"] = int(m.group("hw"))
        if "noop" in rx.groupindex and m.group("noop"):
            return True  # nothing was cut: stays other, with the partition filled in
        rec["kind"] = LogEventKind.TRUNCATION.value
        return True
    return False


# ISR changes

# "[Partition t-0 broker=1]" since 2.0; "Partition [t,0] on broker 1:" before.
PARTITION_PREFIX = (r"(?:\[Partition " + TP + r" broker=\d+\]"
                    r"|Partition \[(?P<t1>[^,\]]+),(?P<p1>\d+)\] on broker \d+:)")
ISR_SHRINK_RE = re.compile(PARTITION_PREFIX + r" Shrinking ISR from (?P<a>[\d,]*) to (?P<b>[\d,]*)"
                           r"(?:\. Leader: \(highWatermark: (?P<hw>\d+))?")
ISR_EXPAND_RE = re.compile(PARTITION_PREFIX + r" Expanding ISR from (?P<a>[\d,]*) to (?P<b>[\d,]*)")
ISR_UPDATE_RE = re.compile(PARTITION_PREFIX + r" ISR updated to (?P<b>[\d,]*)")


def _set_partition_prefix(m: re.Match, rec: dict) -> None:
    if m.group("tp"):
        _set_tp(rec, m.group("tp"))
    else:
        rec["topic"], rec["partition"] = m.group("t1"), int(m.group("p1"))


def _isr(message: str, rec: dict) -> bool:
    for rx, kind in ((ISR_SHRINK_RE, LogEventKind.ISR_SHRINK),
                     (ISR_EXPAND_RE, LogEventKind.ISR_EXPAND),
                     (ISR_UPDATE_RE, LogEventKind.ISR_UPDATE)):
        m = rx.search(message)
        if m is None:
            continue
        _set_partition_prefix(m, rec)
        if "a" in rx.groupindex:
            rec["isr_before"] = _ints(m.group("a"))
        rec["isr_after"] = _ints(m.group("b"))
        if "hw" in rx.groupindex and m.group("hw"):
            rec["high_watermark"] = int(m.group("hw"))
        rec["kind"] = kind.value
        return True
    return False


# leadership as a broker sees it (state-change.log)

LEADER_START_RE = re.compile(
    r"\[Broker id=(?P<b>\d+)\] Leader " + TP + r"(?: with topic id Some\((?P<tid>[^)]*)\))? "
    r"starts at leader epoch (?P<e>-?\d+) from offset (?P<off>-?\d+)"
    r"(?: with partition epoch -?\d+)?, high watermark (?P<hw>-?\d+), "
    r"ISR \[(?P<isr>" + INTS + r")\]")
FOLLOWER_START_RE = re.compile(
    r"\[Broker id=\d+\] Follower " + TP + r" starts at leader epoch (?P<e>-?\d+) from offset "
    r"(?P<off>-?\d+)(?: with partition epoch -?\d+)? and high watermark (?P<hw>-?\d+)\. "
    r"Current leader is (?P<leader>-?\d+)\.")
PREVIOUS_LEADER_RE = re.compile(r"Previous leader (?:Some\((?P<a>-?\d+)\)|(?P<b>-?\d+)|None)")


def _leader_start(message: str, rec: dict) -> bool:
    m = LEADER_START_RE.search(message)
    follower = None if m else FOLLOWER_START_RE.search(message)
    if m is None and follower is None:
        return False
    m = m or follower
    _set_tp(rec, m.group("tp"))
    rec["leader_epoch"] = int(m.group("e"))
    rec["offset"] = int(m.group("off"))
    rec["high_watermark"] = int(m.group("hw"))
    if follower is None:
        rec["new_leader"] = int(m.group("b"))
        rec["topic_id"] = m.group("tid")
        rec["isr_after"] = _ints(m.group("isr"))
    else:
        rec["new_leader"] = int(m.group("leader"))
    if prev := PREVIOUS_LEADER_RE.search(message, m.end()):
        old = prev.group("a") or prev.group("b")
        rec["old_leader"] = int(old) if old is not None else None
    rec["kind"] = LogEventKind.LEADER_CHANGE.value
    return True


# follower fetch offsets

OUT_OF_RANGE_RE = re.compile(r"Current offset (?P<from>-?\d+) for partition " + TP +
                             r" is out of range, which typically implies a leader change\. "
                             r"Reset fetch offset to (?P<off>-?\d+)")
RESET_RE = re.compile(r"Reset fetch offset for partition " + TP + r" from (?P<from>-?\d+) to "
                      r"(?:the )?current [a-z' ]*?offset (?P<off>-?\d+)")


def _offset_reset(message: str, rec: dict) -> bool:
    for rx, kind in ((OUT_OF_RANGE_RE, LogEventKind.OFFSET_OUT_OF_RANGE),
                     (RESET_RE, LogEventKind.OFFSET_RESET)):
        m = rx.search(message)
        if m:
            _set_tp(rec, m.group("tp"))
            rec["from_offset"], rec["offset"] = int(m.group("from")), int(m.group("off"))
            rec["kind"] = kind.value
            return True
    return False


# group coordinator moves

COORDINATOR_RE = re.compile(
    r"Scheduling (?P<what>loading|unloading) of (?:metadata|offsets and group metadata) "
    r"(?:from|for) __consumer_offsets-(?P<p>\d+)"
    r"(?: (?:with|for) epoch (?:OptionalInt\[)?(?P<e>-?\d+))?")


def _coordinator(message: str, rec: dict) -> bool:
    m = COORDINATOR_RE.search(message)
    if m is None:
        return False
    rec["topic"], rec["partition"] = "__consumer_offsets", int(m.group("p"))
    if m.group("e") is not None:
        rec["leader_epoch"] = int(m.group("e"))
    rec["kind"] = (LogEventKind.COORDINATOR_LOAD if m.group("what") == "loading"
                   else LogEventKind.COORDINATOR_UNLOAD).value
    return True


# the controller on brokers' sessions, and a broker's own shutdown

BROKER_STATE_RES = (
    (re.compile(r"Fencing broker (?P<b>\d+)(?: at epoch -?\d+)? because its session has "
                r"timed out"), LogEventKind.BROKER_FENCED),
    (re.compile(r"broker (?P<b>\d+) has requested and been granted a controlled shutdown"),
     LogEventKind.BROKER_SHUTDOWN),
    (re.compile(r"Registering a new incarnation of broker (?P<b>\d+)\b"),
     LogEventKind.BROKER_REGISTERED),
    (re.compile(r"The request from broker (?P<b>\d+) to unfence has been granted"),
     LogEventKind.BROKER_UNFENCED),
    (re.compile(r"\[BrokerServer id=(?P<b>\d+)\] Transition from \w+ to SHUTTING_DOWN\b"),
     LogEventKind.BROKER_SHUTDOWN),
)


def _broker_state(message: str, rec: dict) -> bool:
    for regex, kind in BROKER_STATE_RES:
        if m := regex.search(message):
            rec["subject_broker"] = int(m.group("b"))
            rec["kind"] = kind.value
            return True
    return False


UNREACHABLE_RE = re.compile(r"\[ReplicaFetcher replicaId=-?\d+, leaderId=\d+[^\]]*\] Connection "
                            r"to node (?P<b>\d+) \([^)]*\) could not be established\. "
                            r"(?:Node|Broker) may not be available")


def _unreachable(message: str, rec: dict) -> bool:
    if m := UNREACHABLE_RE.search(message):
        rec["subject_broker"] = int(m.group("b"))
        rec["kind"] = LogEventKind.BROKER_UNREACHABLE.value
        return True
    return False


# the log cleaner's summary

NUMBER = r"(-?[\d,]+(?:\.\d+)?|NaN|-?Infinity)"
CLEANED_RE = re.compile(r"cleaned log " + TP +
                        r" \(dirty section = [\[<](?P<a>-?\d+), (?P<b>-?\d+)[\]>]\)")
PROCESSED_RE = re.compile(NUMBER + r" MB of log processed in " + NUMBER + " seconds")
BUFFER_RE = re.compile(r"Buffer utilization: " + NUMBER + "%")
START_SIZE_RE = re.compile(r"Start size: " + NUMBER + r" MB \(([\d,]+) messages\)")
END_SIZE_RE = re.compile(r"End size: " + NUMBER + r" MB \(([\d,]+) messages\)")
REDUCTION_RE = re.compile(NUMBER + r"% size reduction")


def _cleaner_run(message: str, rec: dict) -> bool:
    m = CLEANED_RE.search(message)
    if m is None:
        return False
    _set_tp(rec, m.group("tp"))
    rec["dirty_start"], rec["dirty_end"] = int(m.group("a")), int(m.group("b"))
    if p := PROCESSED_RE.search(message):
        rec["mb_processed"], rec["seconds"] = _num(p.group(1)), _num(p.group(2))
    if b := BUFFER_RE.search(message):
        rec["buffer_utilization_pct"] = _num(b.group(1))
    if s := START_SIZE_RE.search(message):
        rec["start_size_mb"], rec["start_messages"] = _num(s.group(1)), _count(s.group(2))
    if e := END_SIZE_RE.search(message):
        rec["end_size_mb"], rec["end_messages"] = _num(e.group(1)), _count(e.group(2))
    if r := REDUCTION_RE.search(message):
        rec["reduction_pct"] = _num(r.group(1))
    rec["kind"] = LogEventKind.CLEANER_RUN.value
    return True


# (keyword that must be in the message, rule): the keyword skips the regexes cheaply for the
# great majority of lines, which are none of these.
RULES = (
    ("cleaned log", _cleaner_run),
    ("UNCLEAN", _unclean_change),
    ("unclean election", _unclean_setting),
    ("Triggering unclean", _unclean_trigger),
    ("Truncating", _truncation),
    ("ISR", _isr),
    ("starts at leader epoch", _leader_start),
    ("fetch offset", _offset_reset),
    ("Scheduling", _coordinator),
    ("Fencing broker", _broker_state),
    ("granted a controlled shutdown", _broker_state),
    ("new incarnation of broker", _broker_state),
    ("to unfence has been granted", _broker_state),
    ("to SHUTTING_DOWN", _broker_state),
    ("could not be established", _unreachable),
)


def parse_lines(lines: Iterable[str | bytes], *, cluster: str, broker: int,
                log: str | None = None, tz: tzinfo = UTC) -> Iterator[dict | Malformed]:
    """Records (or Malformed) from a whole sequence of lines, e.g. a file read to its end."""
    for event in EventAssembler().feed_all(lines):
        if isinstance(event, Malformed):
            yield event
        else:
            yield parse_event(event, cluster=cluster, broker=broker, log=log, tz=tz)
