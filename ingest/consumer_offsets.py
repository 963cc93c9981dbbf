"""Decode ``__consumer_offsets`` records into `offset_commits` records.

The group coordinator writes every offset commit of every group to this compacted topic.
The agent reads it with ``assign()`` (never subscribe, never commit) and
``isolation.level=read_committed`` and hands each record's key and value bytes here.

Layouts, from apache/kafka group-coordinator/src/main/resources/common/message/
(LegacyOffsetCommitKey.json, OffsetCommitKey.json, OffsetCommitValue.json) and checked
against the generated classes of kafka-group-coordinator 4.3.1 (``SCHEMAS``). Integers are
big-endian; a STRING is an int16 length then UTF-8 bytes; a COMPACT_STRING an unsigned
varint of length + 1 then the bytes; TAGGED_FIELDS an unsigned varint count, then per field
an unsigned varint tag, an unsigned varint size and the bytes.

Key: int16 key version (since 3.x named the record type) then

- 0 (LegacyOffsetCommitKey), 1 (OffsetCommitKey): group STRING, topic STRING, partition
  INT32 — an offset commit;
- 2 (GroupMetadataKey): group STRING — a classic group's state after each rebalance or
  when it empties (`parse_group_record`, stream ``group_members``);
- 3 .. 255: records of newer group protocols (KIP-848 consumer groups, share and streams
  groups; 4.3.1's CoordinatorRecordType defines 3..23), skipped ("newer_group_record");
  a larger number is not a record type but damage ("bad_key_version").

Value: int16 value version then

- v0: offset INT64, metadata STRING, commitTimestamp INT64
- v1: offset INT64, metadata STRING, commitTimestamp INT64, expireTimestamp INT64
- v2: offset INT64, metadata STRING, commitTimestamp INT64
- v3: offset INT64, leaderEpoch INT32, metadata STRING, commitTimestamp INT64
- v4 (flexible): offset INT64, leaderEpoch INT32, metadata COMPACT_STRING, commitTimestamp
  INT64, TAGGED_FIELDS — tag 0 is the topic id (16 bytes, a Uuid): present in the 4.3.1
  classes (``SCHEMA_4``), absent from older copies of OffsetCommitValue.json. Unknown tags
  are skipped, as Kafka's own reader does.

GroupMetadataValue (GroupMetadataValue.json; flexible from v4): protocolType STRING,
generation INT32, protocol NULLABLE STRING, leader NULLABLE STRING, currentStateTimestamp
INT64 (v2+), members ARRAY of MemberMetadata: memberId STRING, groupInstanceId NULLABLE
STRING (v3+), clientId STRING, clientHost STRING, rebalanceTimeout INT32 (v1+),
sessionTimeout INT32, subscription BYTES, assignment BYTES (v4: compact types and tagged
fields after each struct). A group whose last member left is written with no members:
that is how the detectors know an offset commit came from an admin tool.

Kafka 4.3.1 writes key version 1 and value version 4 with the topic id (captured), where
TELEMETRY.md expected v3. A null value is a tombstone: the group's offset for that
partition was deleted (group deleted, offsets expired or deleted by an operator).

A captured v4 record (hex), key then value:

    0001 0015 72646b61666b612d756e636c65616e2d67726f7570 0009 756e636c65616e2d74 00000000
    0004 0000000000000032 00000000 01 000001a202d72915 01 00 10 bf609c3631f343ea8774f2e20c0d5c87

Returns a record, `Skipped` (documented skips above) or `Malformed` (missing_field:key,
truncated_key, truncated_value, bad_key_version, unknown_value_version:<v>, trailing_bytes,
the name of the check a value would break (missing_field:<column>, negative_partition,
negative_offset, implausible_event_time, ...: schemas/plausible.py),
not_utf8); the raw input of a Malformed is ``key=<hex> value=<hex|null>``.
"""

from __future__ import annotations

import base64
import struct

from ingest.malformed import Malformed, Skipped
from schemas.plausible import MAX_TS_MS, MIN_TS_MS

SOURCE = "consumer_offsets"
MAX_RECORD_TYPE = 255
MAX_METADATA_CHARS = 4096
TOPIC_ID_TAG = 0

RECORD_FIELDS = (
    "cluster", "ts_ms", "group_id", "topic", "partition", "offset", "leader_epoch", "metadata",
    "commit_ts_ms", "expire_ts_ms", "topic_id", "key_version", "value_version", "is_tombstone",
    "source_partition", "source_offset",
)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class _Truncated(Exception):
    pass


class _Reader:
    """Reads the Kafka protocol's primitive types from a bytes buffer."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise _Truncated()
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise _Truncated()  # longer than the 5 bytes an int32 varint may take

    def string(self) -> str | None:
        n = self.int16()
        return None if n == -1 else self._take(n).decode("utf-8")

    def compact_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1).decode("utf-8")

    def tagged_fields(self) -> dict[int, bytes]:
        return {self.uvarint(): self._take(self.uvarint()) for _ in range(self.uvarint())}

    def at_end(self) -> bool:
        return self.pos == len(self.data)


def uuid_to_str(raw: bytes) -> str:
    """A Kafka Uuid as Kafka prints it: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def raw_record_text(key: bytes | None, value: bytes | None) -> str:
    """A record as quarantine keeps it: ``key=<hex> value=<hex>`` (``null`` for none)."""
    def hexed(b: bytes | None) -> str:
        return b.hex() if b is not None else "null"
    return f"key={hexed(key)} value={hexed(value)}"


def decode_key(key: bytes) -> tuple[int, str, str, int] | Skipped:
    """(key version, group, topic, partition) of an offset commit key, or Skipped.

    Raises _Truncated, UnicodeDecodeError or ValueError (bad version) for bad bytes.
    """
    r = _Reader(key)
    version = r.int16()
    if version < 0 or version > MAX_RECORD_TYPE:
        raise ValueError("bad_key_version")
    if version == 2:
        return Skipped(SOURCE, "group_metadata")  # parse_group_record handles these
    if version > 2:
        return Skipped(SOURCE, "newer_group_record")
    group, topic, partition = r.string(), r.string(), r.int32()
    if not r.at_end():
        raise ValueError("trailing_bytes")
    return version, group, topic, partition


def decode_value(value: bytes) -> dict:
    """The fields of an OffsetCommitValue; raises like `decode_key`."""
    r = _Reader(value)
    version = r.int16()
    if version < 0 or version > 4:
        raise ValueError(f"unknown_value_version:{version}")
    out = {"value_version": version, "offset": r.int64(), "leader_epoch": None,
           "expire_ts_ms": None, "topic_id": None}
    if version >= 3:
        out["leader_epoch"] = r.int32()
    out["metadata"] = r.compact_string() if version >= 4 else r.string()
    out["commit_ts_ms"] = r.int64()
    if version == 1:
        out["expire_ts_ms"] = r.int64()
    if version >= 4:
        tagged = r.tagged_fields()
        if len(tagged.get(TOPIC_ID_TAG, b"")) == 16:
            out["topic_id"] = uuid_to_str(tagged[TOPIC_ID_TAG])
    if not r.at_end():
        raise ValueError("trailing_bytes")
    return out


def parse_offset_record(key: bytes | None, value: bytes | None, *, cluster: str,
                        source_partition: int | None = None, source_offset: int | None = None,
                        ts_ms: int | None = None) -> dict | Skipped | Malformed:
    """One __consumer_offsets record -> an offset_commits record, Skipped or Malformed.

    `ts_ms` is the Kafka record's timestamp (the only time a tombstone has); the source
    coordinates are the record's partition and offset in __consumer_offsets.
    """
    if key is None:
        return Malformed(SOURCE, "missing_field:key", raw_record_text(key, value), ts_ms)
    try:
        k = decode_key(bytes(key))
    except _Truncated:
        return Malformed(SOURCE, "truncated_key", raw_record_text(key, value), ts_ms)
    except UnicodeDecodeError:
        return Malformed(SOURCE, "not_utf8", raw_record_text(key, value), ts_ms)
    except ValueError as e:
        return Malformed(SOURCE, str(e), raw_record_text(key, value), ts_ms)
    if isinstance(k, Skipped):
        return k
    key_version, group, topic, partition = k
    rec = dict.fromkeys(RECORD_FIELDS)
    rec.update(cluster=cluster, ts_ms=ts_ms, group_id=group, topic=topic, partition=partition,
               key_version=key_version, is_tombstone=value is None,
               source_partition=source_partition, source_offset=source_offset)
    if value is None:
        reason = _implausible_commit(rec)
        return rec if reason is None else Malformed(SOURCE, reason, raw_record_text(key, value),
                                                    ts_ms)
    try:
        v = decode_value(bytes(value))
    except _Truncated:
        return Malformed(SOURCE, "truncated_value", raw_record_text(key, value), ts_ms)
    except UnicodeDecodeError:
        return Malformed(SOURCE, "not_utf8", raw_record_text(key, value), ts_ms)
    except ValueError as e:
        return Malformed(SOURCE, str(e), raw_record_text(key, value), ts_ms)
    if v["leader_epoch"] is not None and v["leader_epoch"] < 0:
        v["leader_epoch"] = None  # -1: no epoch known
    if v["expire_ts_ms"] is not None and v["expire_ts_ms"] < 0:
        v["expire_ts_ms"] = None
    if v["metadata"] is not None:
        v["metadata"] = v["metadata"][:MAX_METADATA_CHARS]
    rec.update(v)
    if rec["ts_ms"] is None:
        rec["ts_ms"] = rec["commit_ts_ms"]
    reason = _implausible_commit(rec)
    if reason is not None:
        return Malformed(SOURCE, reason, raw_record_text(key, value), ts_ms)
    return rec


def _plausible_time(ts_ms: int | None) -> bool:
    return ts_ms is not None and MIN_TS_MS <= ts_ms <= MAX_TS_MS


def _implausible_commit(rec: dict) -> str | None:
    """What in an offset commit cannot be true, as the offset_commits check it breaks.

    A null group or topic (a STRING of length -1) names no offset. Offset -1 is Kafka's
    "no offset", which a client speaking the protocol itself can commit; nothing lower
    means anything. The coordinator stamps each commit with its own clock.
    """
    if rec["group_id"] is None:
        return "missing_field:group_id"
    if rec["topic"] is None:
        return "missing_field:topic"
    if rec["partition"] < 0:
        return "negative_partition"
    if rec["ts_ms"] is None:
        return "missing_field:ts_ms"
    if not _plausible_time(rec["ts_ms"]):
        return "implausible_event_time"
    if rec["is_tombstone"]:
        return None
    if rec["offset"] < -1:
        return "negative_offset"
    if not _plausible_time(rec["commit_ts_ms"]):
        return "implausible_commit_time"
    return None


GROUP_RECORD_FIELDS = (
    "cluster", "ts_ms", "group_id", "protocol_type", "generation", "protocol", "leader",
    "member_count", "client_ids", "state_ts_ms", "value_version", "is_tombstone",
    "source_partition", "source_offset",
)
MAX_CLIENT_IDS = 50


def is_group_key(key: bytes | None) -> bool:
    """A GroupMetadataKey (key version 2)?"""
    return key is not None and len(key) >= 2 and _I16.unpack(bytes(key[:2]))[0] == 2


def decode_group_value(value: bytes) -> dict:
    """The fields of a GroupMetadataValue that kmon keeps; raises like `decode_key`."""
    r = _Reader(value)
    version = r.int16()
    if version < 0 or version > 4:
        raise ValueError(f"unknown_value_version:{version}")
    flexible = version >= 4
    text = r.compact_string if flexible else r.string

    def blob() -> None:
        r._take(r.uvarint() - 1 if flexible else r.int32())

    out = {"value_version": version, "protocol_type": text(), "generation": r.int32(),
           "protocol": text(), "leader": text(), "state_ts_ms": None}
    if version >= 2:
        ts = r.int64()
        out["state_ts_ms"] = ts if ts >= 0 else None
    count = r.uvarint() - 1 if flexible else r.int32()
    if count < 0:
        raise ValueError("bad_member_count")
    clients = []
    for _ in range(count):
        text()                        # memberId
        if version >= 3:
            text()                    # groupInstanceId
        clients.append(text())        # clientId
        text()                        # clientHost
        if version >= 1:
            r.int32()                 # rebalanceTimeout
        r.int32()                     # sessionTimeout
        blob()                        # subscription
        blob()                        # assignment
        if flexible:
            r.tagged_fields()
    if flexible:
        r.tagged_fields()
    if not r.at_end():
        raise ValueError("trailing_bytes")
    out["member_count"] = count
    out["client_ids"] = sorted({c for c in clients if c})[:MAX_CLIENT_IDS]
    return out


def parse_group_record(key: bytes, value: bytes | None, *, cluster: str,
                       source_partition: int | None = None, source_offset: int | None = None,
                       ts_ms: int | None = None) -> dict | Malformed:
    """A GroupMetadataKey/Value pair -> a group_members record (a tombstone: group deleted)."""
    try:
        r = _Reader(bytes(key))
        r.int16()
        group = r.string()
        if not r.at_end():
            raise ValueError("trailing_bytes")
        v = decode_group_value(bytes(value)) if value is not None else {}
    except _Truncated:
        return Malformed(SOURCE, "truncated_key" if value is None else "truncated_value",
                         raw_record_text(key, value), ts_ms)
    except UnicodeDecodeError:
        return Malformed(SOURCE, "not_utf8", raw_record_text(key, value), ts_ms)
    except ValueError as e:
        return Malformed(SOURCE, str(e), raw_record_text(key, value), ts_ms)
    rec = dict.fromkeys(GROUP_RECORD_FIELDS)
    rec.update(v)
    rec.update(cluster=cluster, ts_ms=ts_ms, group_id=group, is_tombstone=value is None,
               source_partition=source_partition, source_offset=source_offset)
    if value is None:
        rec["member_count"], rec["client_ids"] = 0, []
    reason = _implausible_group(rec)
    if reason is not None:
        return Malformed(SOURCE, reason, raw_record_text(key, value), ts_ms)
    return rec


def _implausible_group(rec: dict) -> str | None:
    """What in a group's state cannot be true, as the group_members check it breaks: a
    classic group's generation starts at 0 and only grows."""
    if rec["group_id"] is None:
        return "missing_field:group_id"
    if rec["ts_ms"] is None:
        return "missing_field:ts_ms"
    if not _plausible_time(rec["ts_ms"]):
        return "implausible_event_time"
    if not rec["is_tombstone"] and rec["generation"] < 0:
        return "negative_generation"
    if rec["state_ts_ms"] is not None and not _plausible_time(rec["state_ts_ms"]):
        return "implausible_state_time"
    return None


# ---- encoding: for tests only (round trips of every version) -----------------------------

def _string(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    b = s.encode("utf-8")
    return _I16.pack(len(b)) + b


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _compact_string(s: str | None) -> bytes:
    if s is None:
        return _uvarint(0)
    b = s.encode("utf-8")
    return _uvarint(len(b) + 1) + b


def encode_key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    """An offset commit key (version 0 or 1). Tests only."""
    return _I16.pack(version) + _string(group) + _string(topic) + _I32.pack(partition)


def encode_value(offset: int, metadata: str | None, commit_ts_ms: int, *, version: int = 3,
                 leader_epoch: int = -1, expire_ts_ms: int = -1,
                 topic_id: bytes | None = None) -> bytes:
    """An OffsetCommitValue of any version 0..4. Tests only."""
    out = _I16.pack(version) + _I64.pack(offset)
    if version >= 3:
        out += _I32.pack(leader_epoch)
    out += _compact_string(metadata) if version >= 4 else _string(metadata)
    out += _I64.pack(commit_ts_ms)
    if version == 1:
        out += _I64.pack(expire_ts_ms)
    if version >= 4:
        tagged = {TOPIC_ID_TAG: topic_id} if topic_id is not None else {}
        out += _uvarint(len(tagged))
        for tag, data in sorted(tagged.items()):
            out += _uvarint(tag) + _uvarint(len(data)) + data
    return out


def encode_group_value(members: list[tuple[str, str]], *, generation: int = 1,
                       protocol: str | None = "range", leader: str | None = None,
                       version: int = 3, state_ts_ms: int = -1) -> bytes:
    """A GroupMetadataValue of any version 0..4; members are (member id, client id). Tests."""
    flexible = version >= 4
    text = _compact_string if flexible else _string

    def blob(b: bytes) -> bytes:
        return (_uvarint(len(b) + 1) if flexible else _I32.pack(len(b))) + b

    out = _I16.pack(version) + text("consumer") + _I32.pack(generation) + text(protocol)
    out += text(leader if leader is not None or not members else members[0][0])
    if version >= 2:
        out += _I64.pack(state_ts_ms)
    out += _uvarint(len(members) + 1) if flexible else _I32.pack(len(members))
    for member_id, client_id in members:
        out += text(member_id)
        if version >= 3:
            out += text(None)
        out += text(client_id) + text("/127.0.0.1")
        if version >= 1:
            out += _I32.pack(300000)
        out += _I32.pack(45000) + blob(b"sub") + blob(b"assign")
        if flexible:
            out += _uvarint(0)
    if flexible:
        out += _uvarint(0)
    return out


def encode_group_key(group: str) -> bytes:
    """A GroupMetadataKey. Tests only."""
    return _I16.pack(2) + _string(group)
