"""Fuzzing every edge parser with hypothesis, from the captured fixtures (issue 25).

Each property picks a real fixture sample (a request-log line, a broker-log event, a client
log line, a ``__consumer_offsets`` key and value, a librdkafka statistics document, a few
families of the JMX exposition) and applies mutations hypothesis draws: character or byte
flips, insertions of tricky text (backslash escapes, quotes, braces, lone surrogates, huge
numbers, NaN), numbers swapped for tricky ones, cuts, deleted spans and duplicated spans or
JSON fields. Whatever comes out, the parser returns a record (or records), a `Malformed` or
a `Skipped`, never raises, and every record it returns has its table's columns, in order,
of the schema's types, each integer within its column's width, publishes as JSON and
passes the table's declared validity rules (``REQUIRED`` and ``CHECKS``, the plausibility
bounds of schemas/plausible.py among them, evaluated here in Python with the SQL null
rule: null counts as broken), but for gaps listed in `KNOWN_GAPS` (rows the silver job
quarantines; none today). For the request log the fast path and the full JSON decode
agree on every input both find valid, except for the body facts the fast path scans
rather than decodes; where only the fast path finds a line valid, the full decode's
reason is damage to JSON it does not read, or a body fact it reads elsewhere.

Every property runs twice: on a fixed profile (derandomize, no example database, the
explicit examples: inputs the fuzzer found, kept once fixed) and on a bounded number of
inputs drawn with a fresh seed each run, so CI keeps exploring. The seed is printed with a
failure (and in the ``-s`` output); ``KMON_FUZZ_SEED=<seed>`` replays it. Both are sized so
the file runs in a few minutes on two cores; ``python -m bench.bench_fuzz`` runs the same
properties for minutes each.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, example, given, note, seed, settings
from hypothesis import strategies as st
from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, IntegerType, LongType,
                               MapType, StringType, StructType)
from tests.unit.captured import FIXTURES, fixture_json, fixture_lines

from ingest import broker_log, client_log, client_stats, consumer_offsets, jmx_scraper
from ingest import request_log
from ingest.malformed import Malformed, Skipped
from schemas import (broker_metrics, client_offset_events, group_members, log_events,
                     offset_commits, request_stages)
from schemas import client_stats as client_stats_table

pytestmark = pytest.mark.unit

settings.register_profile(
    "kmon-fuzz", derandomize=True, deadline=None, database=None, print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.large_base_example, HealthCheck.filter_too_much])
FUZZ = settings.get_profile("kmon-fuzz")
FRESH = settings(FUZZ, derandomize=False, print_blob=True)

# The fresh run's seed: KMON_FUZZ_SEED to replay one, else a new one each run.
FUZZ_SEED = int(os.environ.get("KMON_FUZZ_SEED") or random.SystemRandom().randrange(2 ** 32))
# The fresh run draws this share of a property's fixed examples.
FRESH_SHARE = 0.25
print(f"parser fuzz: fresh seed KMON_FUZZ_SEED={FUZZ_SEED}", file=sys.stderr)


@dataclass(frozen=True)
class FuzzProperty:
    """One parser's property: `check` of one drawn input (a tuple of `strategies`' values)
    raises when the parser breaks its contract. `examples` are inputs the fuzzer found,
    run first on the fixed profile."""

    name: str
    check: Callable[..., None]
    strategies: tuple
    max_examples: int
    examples: tuple[tuple, ...] = ()

    def hypothesis_test(self, *, fresh_seed: int | None = None, max_examples: int | None = None,
                        on_example: Callable[[], None] | None = None):
        """The property as a hypothesis test: the fixed profile and its examples, or
        `fresh_seed`'s draws; `on_example` is called for every input run."""
        def run(args):
            if on_example is not None:
                on_example()
            if fresh_seed is not None:
                note(f"replay with KMON_FUZZ_SEED={fresh_seed}")
            self.check(*args)

        test = given(st.tuples(*self.strategies))(run)
        if fresh_seed is None:
            for args in reversed(self.examples):
                test = example(args)(test)
            return settings(FUZZ, max_examples=max_examples or self.max_examples)(test)
        n = max_examples or max(1, int(self.max_examples * FRESH_SHARE))
        return seed(fresh_seed)(settings(FRESH, max_examples=n)(test))

CLUSTER = "fuzz"
TS_MS = 1795343920123

# ---- validity of a record against its table ------------------------------------------------

_PY_TYPES = {StringType: (str,), LongType: (int,), IntegerType: (int,), BooleanType: (bool,),
             DoubleType: (float, int)}
_INT_RANGE = {IntegerType: 2 ** 31, LongType: 2 ** 63}


def _type_problem(value, dtype) -> str | None:
    """None, ``type`` (not of the column's type) or ``range`` (an integer wider than it)."""
    if value is None:
        return None
    if isinstance(dtype, ArrayType):
        if not isinstance(value, list):
            return "type"
        problems = {_type_problem(v, dtype.elementType) for v in value} - {None}
        return "type" if "type" in problems else next(iter(problems), None)
    if isinstance(dtype, StructType):
        if not isinstance(value, dict) or set(value) != set(dtype.fieldNames()):
            return "type"
        problems = {_type_problem(value[f.name], f.dataType) for f in dtype.fields} - {None}
        return "type" if "type" in problems else next(iter(problems), None)
    if isinstance(dtype, MapType):
        if not isinstance(value, dict):
            return "type"
        problems = {_type_problem(x, t) for k, v in value.items()
                    for x, t in ((k, dtype.keyType), (v, dtype.valueType))} - {None}
        return "type" if "type" in problems else next(iter(problems), None)
    types = _PY_TYPES[type(dtype)]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        return "type"
    bound = _INT_RANGE.get(type(dtype))
    if bound is not None and not -bound <= value < bound:
        return "range"
    return None


def _python_condition(sql: str) -> str:
    """A table's SQL condition as a Python expression (the few forms schemas/ use, see
    schemas/plausible.py); `SQL_FUNCTIONS` holds the functions it calls."""
    py = re.sub(r"(\w+) BETWEEN (\S+) AND (\S+)", r"(\2 <= \1 <= \3)", sql)
    py = re.sub(r"(\w+) IS NOT NULL", r"(\1 is not None)", py)
    py = re.sub(r"(\w+) IS NULL", r"(\1 is None)", py)
    py = re.sub(r" IN \(([^)]*)\)", r" in {\1}", py)
    py = re.sub(r"(?<![<>!=])=(?!=)", "==", py)
    py = re.sub(r"\b(size|array_min|array_max|coalesce)\(", r"_\1(", py)
    return re.sub(r"\b(AND|OR|NOT)\b", lambda m: m.group(1).lower(), py)


def _coalesce(*values):
    return next((v for v in values if v is not None), None)


# Spark's forms: size(null) is -1, array_min/max skip nulls and give null for no values.
SQL_FUNCTIONS = {
    "_size": lambda a: -1 if a is None else len(a),
    "_array_min": lambda a: min((v for v in a if v is not None), default=None),
    "_array_max": lambda a: max((v for v in a if v is not None), default=None),
    "_coalesce": _coalesce,
    "__builtins__": {},
}


def _rules(table) -> list[tuple[str, str]]:
    required = [(f"missing_field:{c}", f"{c} IS NOT NULL") for c in table.REQUIRED]
    checks = list(getattr(table, "CHECKS", {}).items())
    return [(name, _python_condition(sql)) for name, sql in required + checks]


_TABLE_RULES = {t: _rules(t) for t in (request_stages, log_events, client_offset_events,
                                       offset_commits, group_members, client_stats_table,
                                       broker_metrics)}


def violations(rec, table) -> list[str]:
    """The rules of `table` the record breaks: ``type:<column>`` (not of the column's type),
    ``range:<column>`` (an integer wider than the column), ``json`` (it cannot be published)
    and the names of its REQUIRED and CHECKS rules."""
    broken = [f"{problem}:{f.name}" for f in table.SCHEMA.fields
              for problem in [_type_problem(rec[f.name], f.dataType)] if problem is not None]
    for name, condition in _TABLE_RULES[table]:
        try:
            ok = eval(condition, SQL_FUNCTIONS, dict(rec))  # noqa: S307 - our own text
        except TypeError:  # a comparison with None: SQL gives null, which counts as broken
            ok = False
        if not ok:
            broken.append(name)
    try:
        json.dumps(rec, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        broken.append("json")
    return broken


# What the fuzzer shows parsers let through; the silver job sends a row that breaks a rule
# to quarantine (jobs/validation.py). Listed so that anything else fails here; a parser
# fix that returns Malformed instead removes its entry. None today: every parser refuses
# what its table's checks refuse (schemas/plausible.py), and bounds the integers it reads
# to the column's width (``range:<column>`` here).
KNOWN_GAPS: dict[object, set[str]] = {}


def _known(table, rule: str) -> bool:
    return rule in KNOWN_GAPS.get(table, set())


def assert_valid_record(rec, table) -> None:
    assert isinstance(rec, dict), rec
    assert list(rec) == table.SCHEMA.fieldNames(), list(rec)
    broken = {rule for rule in violations(rec, table) if not _known(table, rule)}
    assert not broken, f"breaks {sorted(broken)}: {rec!r}"[:3000]


def assert_reason(got, source: str) -> None:
    assert isinstance(got, (Malformed, Skipped)), got
    assert got.source == source
    assert isinstance(got.reason, str) and got.reason
    assert not got.reason.startswith("parser_exception")
    if isinstance(got, Malformed):
        row = got.to_quarantine_record(cluster=CLUSTER, ingest_ts_ms=TS_MS)
        json.dumps(row, ensure_ascii=False, allow_nan=False).encode("utf-8")


# ---- mutations -----------------------------------------------------------------------------

NUMBERS = ["0", "-1", "-0", "0.0", "-0.5", "1.5e3", "2147483647", "2147483648", "-2147483649",
           "9223372036854775807", "9223372036854775808", "-9223372036854775809",
           "1" + "0" * 40, "9" * 5000, "NaN", "-NaN", "Infinity", "-Infinity", "1e999",
           "-1e999", "1e-400", "0x10", "+5", "1_000", "١٢"]
TRICKY = ["\\", '"', "'", "{", "}", "[", "]", ",", ":", "=", "(", ")", "-", ".", "e", " ",
          "\t", "\n", "\r", "\x00", "\x7f", "é", "\u2028", "\ufeff", "\ud800", "\udfff",
          "\U0001f600", "\\ud800", "\\udc00", "\\ud83d\\ude00", "\\u12", "\\u0000", "\\q",
          '\\"', "\\\\", "\\n", "null", "true", "[]", "{}", '""', '"x":1', *NUMBERS]
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_STRUCTURE_RE = re.compile(r'["{}\[\]:,=()\\ ]')
_JSON_FIELD_RE = re.compile(r'"\w+":(?:"[^"\\]*"|[^,{}\[\]"]*)')
_tricky = st.sampled_from(TRICKY) | st.text(max_size=3)


@st.composite
def _mutate_text(draw, text: str) -> str:
    kind = draw(st.sampled_from(["flip", "insert", "replace", "truncate", "delete",
                                 "duplicate", "number", "structure", "field"]))
    n = len(text)
    i = draw(st.integers(0, n))
    if kind == "flip" and n:
        i = min(i, n - 1)
        return text[:i] + draw(st.characters()) + text[i + 1:]
    if kind == "insert":
        return text[:i] + draw(_tricky) + text[i:]
    if kind == "replace":
        return text[:i] + draw(_tricky) + text[i + draw(st.integers(1, 8)):]
    if kind == "truncate":
        return text[:i]
    if kind == "delete":
        return text[:i] + text[i + draw(st.integers(1, 40)):]
    if kind == "duplicate":
        j = draw(st.integers(i, min(n, i + 300)))
        return text[:j] + text[i:j] + text[j:]
    spans = {"number": _NUMBER_RE, "structure": _STRUCTURE_RE, "field": _JSON_FIELD_RE}.get(kind)
    matches = list(spans.finditer(text)) if spans is not None else []
    if not matches:
        return text[:i] + draw(_tricky) + text[i:]
    m = draw(st.sampled_from(matches))
    if kind == "number":
        return text[:m.start()] + draw(st.sampled_from(NUMBERS)) + text[m.end():]
    if kind == "structure":
        return text[:m.end()] + draw(_tricky) + text[m.end():]
    # a JSON field written twice, the copy maybe with another value
    copy = m.group()
    if draw(st.booleans()):
        copy = copy[:copy.index(":") + 1] + draw(st.sampled_from(['"x"', "null", "[]", "{}",
                                                                   *NUMBERS]))
    return text[:m.end()] + "," + copy + text[m.end():]


@st.composite
def mutated_text(draw, samples: list[str], max_mutations: int = 4) -> str:
    text = draw(st.sampled_from(samples))
    for _ in range(draw(st.integers(1, max_mutations))):
        text = draw(_mutate_text(text))
    return text


def as_input(text: str, as_bytes: bool) -> str | bytes:
    """What an agent hands the parser: bytes read from a file (a lone surrogate becomes the
    invalid UTF-8 it would be on disk), or text."""
    return text.encode("utf-8", "surrogatepass") if as_bytes else text


# ---- request log ---------------------------------------------------------------------------

REQUEST_LINES = fixture_lines("request_log/kafka-4.3.1-request.log")
LEGACY_REQUEST_LINES = [line for line in fixture_lines("request_log/kafka-2.x-request.log")
                        if line.strip()]


def _parse_request(line, full_decode: bool):
    return request_log.parse_request_line(line, cluster=CLUSTER, broker=1,
                                          full_decode=full_decode)


# Columns the fast path takes from a string scan of the request and response bodies.
BODY_FACTS = ("fetch_kind", "fetch_replica_id", "acks", "topics", "topic_ids", "partition_count",
              "request_bytes", "response_bytes", "error_codes")
# Full-decode reasons for damage the fast path does not read (bodies it only scans).
JSON_DAMAGE = ("invalid_json", "truncated_json", "bad_escape", "oversize_number",
               "nested_too_deep")


def _check_request_line(line) -> None:
    fast = _parse_request(line, full_decode=False)
    full = _parse_request(line, full_decode=True)
    for got in (fast, full):
        if isinstance(got, Malformed):
            assert_reason(got, request_log.SOURCE)
        else:
            assert_valid_record(got, request_stages)
    if isinstance(fast, Malformed):  # the fast path falls back to the full decode
        assert fast == full, (fast, full)
    elif isinstance(full, Malformed):
        # The price of the fast path (ingest/request_log_fast.py): damage inside a body it
        # scans and does not decode goes unnoticed, and so does a body fact the decode
        # reads elsewhere (a key written twice); the header and timings it does read.
        reason, _, column = full.reason.partition(":")
        assert reason in JSON_DAMAGE or column in BODY_FACTS, (fast, full)
    else:
        differ = {k: (v, full[k]) for k, v in fast.items() if v != full[k]}
        # Produce and Fetch bodies, and every response, are scanned, not decoded.
        scanned = BODY_FACTS if fast["api_key"] in (0, 1) else ("error_codes",)
        differ = {k: v for k, v in differ.items() if k not in scanned}
        assert not differ, differ


def check_request_line(text, as_bytes):
    _check_request_line(as_input(text, as_bytes))


def _edited(line: str, old: str, new: str) -> str:
    assert old in line, old
    return line.replace(old, new, 1)


def _nested(line: str, depth: int) -> str:
    """The line with JSON nested `depth` levels at the start of its request body."""
    return _edited(line, '"request":{', '"request":{"deep":' + "[" * depth + "]" * depth + ",")


_PRODUCE_LINE = next(line for line in REQUEST_LINES if '"requestApiKey":0,' in line)
REQUEST_JSON_LINES = FuzzProperty(
    "request_log_json_lines", check_request_line,
    (mutated_text(REQUEST_LINES), st.booleans()), max_examples=12000, examples=(
        # Found by review: JSON nested ~1,000 levels let RecursionError out of the fast
        # path (msgspec); now nested_too_deep on both paths.
        (_nested(_PRODUCE_LINE, 1000), False),
        (_nested(_PRODUCE_LINE, 100_000), True),
        # Values that cannot be true, accepted before the checks of schemas/plausible.py:
        # a total of 1e308 ms, a stage longer than its total, a correlation id of 2^70.
        (re.sub(r'"totalTimeMs":[0-9.]+', '"totalTimeMs":1e308', _PRODUCE_LINE), False),
        (re.sub(r'"localTimeMs":[0-9.]+', '"localTimeMs":1e9',
                re.sub(r'"totalTimeMs":[0-9.]+', '"totalTimeMs":1', _PRODUCE_LINE)), False),
        (re.sub(r'"correlationId":\d+', f'"correlationId":{2 ** 70}', _PRODUCE_LINE), False),
    ))
REQUEST_LEGACY_LINES = FuzzProperty(
    "request_log_legacy_text_lines", check_request_line,
    (mutated_text(LEGACY_REQUEST_LINES), st.booleans()), max_examples=2500)


# ---- broker logs ---------------------------------------------------------------------------

def _fixture_events() -> list[str]:
    events = []
    for path in sorted((FIXTURES / "broker_log").glob("*.log")):
        lines = fixture_lines(f"broker_log/{path.name}")
        events += [e for e in broker_log.EventAssembler().feed_all(lines)
                   if isinstance(e, str) and e.strip()]
    return events


BROKER_EVENTS = _fixture_events()


def check_broker_log_event(text):
    # As the agent reads them: bytes, lines split at newlines.
    lines = [as_input(line, as_bytes=True) for line in text.split("\n")]
    for got in broker_log.parse_lines(lines, cluster=CLUSTER, broker=1, log="server"):
        if isinstance(got, Malformed):
            assert_reason(got, broker_log.SOURCE)
        else:
            assert_valid_record(got, log_events)


_FOLLOWER = ("[2026-11-22 10:39:50,867] INFO [Broker id=1] Follower orders-0 starts at leader "
             "epoch 1 from offset 767 with partition epoch 3 and high watermark 767. Current "
             "leader is {leader}. (state.change.logger)")
BROKER_LOG_EVENTS = FuzzProperty(
    "broker_log_events", check_broker_log_event, (mutated_text(BROKER_EVENTS),),
    max_examples=5000, examples=(
        # Found by this fuzzer: int() of a number of more digits than Python converts
        # raised ValueError out of parse_event; now Malformed oversize_number.
        (_FOLLOWER.format(leader="9" * 5000),),
        # Accepted before the checks of schemas/plausible.py: leader -2 (-1 is "none"),
        # a negative fetch offset, a level log4j does not have.
        (_FOLLOWER.format(leader="-2"),),
        ("[2026-11-22 10:39:50,867] INFO [ReplicaFetcher replicaId=2, leaderId=1, fetcherId=0] "
         "Current offset -5 for partition orders-0 is out of range, which typically implies a "
         "leader change. Reset fetch offset to 10 (kafka.server.ReplicaFetcherThread)",),
        ("[2026-11-22 10:39:50,867] LOUD [Broker id=1] Hello (state.change.logger)",),
    ))


# ---- client logs ---------------------------------------------------------------------------

CLIENT_LINES = [line for name in ("java-4.3.1.log", "java-older-and-seek.log",
                                  "librdkafka-2.16.log")
                for line in fixture_lines(f"client_log/{name}") if line.strip()]


def check_client_log_line(text, as_bytes, ts_ms):
    got = client_log.parse_client_line(as_input(text, as_bytes), cluster=CLUSTER,
                                       client_id="app", group_id="g", ts_ms=ts_ms)
    if isinstance(got, (Malformed, Skipped)):
        assert_reason(got, client_log.SOURCE)
    else:
        assert_valid_record(got, client_offset_events)


_RDKAFKA_RESET = ("payments [3]: offset reset (at offset {at} (leader epoch 5), broker 1) to "
                  "offset END (leader epoch -1): fetch failed")
CLIENT_LOG_LINES = FuzzProperty(
    "client_log_lines", check_client_log_line,
    (mutated_text(CLIENT_LINES), st.booleans(), st.sampled_from([None, TS_MS])),
    max_examples=5000, examples=(
        # Found by this fuzzer: the same ValueError out of parse_client_line; now
        # oversize_number.
        (_RDKAFKA_RESET.format(at="9" * 5000), False, TS_MS),
        # Accepted before the checks of schemas/plausible.py: a negative offset, an
        # offset wider than 64 bits, a time before 2000.
        (_RDKAFKA_RESET.format(at="-5"), False, TS_MS),
        (_RDKAFKA_RESET.format(at=str(2 ** 70)), False, TS_MS),
        (_RDKAFKA_RESET.format(at="5"), False, 1),
    ))


# ---- __consumer_offsets --------------------------------------------------------------------

def _offset_samples() -> list[tuple[bytes | None, bytes | None, int]]:
    captured = [(bytes.fromhex(r["key"]), bytes.fromhex(r["value"]) if r["value"] else None,
                 r["timestamp"])
                for r in fixture_json("consumer_offsets/kafka-4.3.1.jsonl")]
    co = consumer_offsets
    topic_id = bytes(range(16))
    made = [(co.encode_key("g", "orders", 3, version=kv),
             co.encode_value(42, meta, TS_MS, version=vv, leader_epoch=5, expire_ts_ms=TS_MS + 1,
                             topic_id=topic_id if vv >= 4 else None), TS_MS)
            for kv in (0, 1) for vv in range(5) for meta in ("", "m\u00e9ta", None)]
    groups = [(co.encode_group_key("billing"),
               co.encode_group_value([("m-1", "c-1"), ("m-2", "c-2")], version=vv,
                                     state_ts_ms=TS_MS), TS_MS)
              for vv in range(5)]
    groups += [(co.encode_group_key("billing"), co.encode_group_value([], version=vv,
                                                                       protocol=None), TS_MS)
               for vv in range(5)]
    return captured + made + groups


OFFSET_SAMPLES = _offset_samples()
_TRICKY_BYTES = [b"\x00", b"\xff", b"\x80", b"\x7f", b"\xff\xff", b"\x80\x00", b"\x7f\xff",
                 b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00",
                 b"\xff" * 9 + b"\x01", b"\x80" * 5, b"\xed\xa0\x80", b"\xc3", b"\xf4\x90\x80\x80"]


@st.composite
def _mutate_bytes(draw, data: bytes) -> bytes:
    kind = draw(st.sampled_from(["bit", "byte", "insert", "truncate", "delete", "duplicate",
                                 "version"]))
    n = len(data)
    i = draw(st.integers(0, n))
    if kind == "bit" and n:
        i = min(i, n - 1)
        return data[:i] + bytes([data[i] ^ (1 << draw(st.integers(0, 7)))]) + data[i + 1:]
    if kind == "byte" and n:
        i = min(i, n - 1)
        return data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
    if kind == "truncate":
        return data[:i]
    if kind == "delete":
        return data[:i] + data[i + draw(st.integers(1, 16)):]
    if kind == "duplicate":
        j = draw(st.integers(i, min(n, i + 64)))
        return data[:j] + data[i:j] + data[j:]
    if kind == "version":
        version = draw(st.sampled_from([-1, 0, 1, 2, 3, 4, 5, 23, 255, 256, 0x7FFF]))
        return version.to_bytes(2, "big", signed=True) + data[2:]
    return data[:i] + draw(st.sampled_from(_TRICKY_BYTES) | st.binary(max_size=4)) + data[i:]


@st.composite
def mutated_offset_record(draw):
    key, value, ts_ms = draw(st.sampled_from(OFFSET_SAMPLES))
    for _ in range(draw(st.integers(1, 4))):
        target = draw(st.sampled_from(["key", "value", "value", "tombstone"]))
        if target == "key":
            key = draw(_mutate_bytes(key))
        elif target == "value" and value is not None:
            value = draw(_mutate_bytes(value))
        elif target == "tombstone":
            value = None
    return key, value, ts_ms


def check_consumer_offsets_record(record):
    key, value, ts_ms = record
    if consumer_offsets.is_group_key(key):  # as the agent routes them
        got = consumer_offsets.parse_group_record(key, value, cluster=CLUSTER, ts_ms=ts_ms,
                                                  source_partition=0, source_offset=1)
        table = group_members
    else:
        got = consumer_offsets.parse_offset_record(key, value, cluster=CLUSTER, ts_ms=ts_ms,
                                                   source_partition=0, source_offset=1)
        table = offset_commits
    if isinstance(got, (Malformed, Skipped)):
        assert_reason(got, consumer_offsets.SOURCE)
    else:
        assert_valid_record(got, table)


_co = consumer_offsets
CONSUMER_OFFSETS_RECORDS = FuzzProperty(
    "consumer_offsets_keys_and_values", check_consumer_offsets_record,
    (mutated_offset_record(),), max_examples=6000, examples=(
        # Accepted before the checks of schemas/plausible.py: a null group or topic, a
        # negative partition, offset -5, commit time -1, generation -5.
        ((b"\x00\x01\xff\xff" + _co.encode_key("g", "t", 0)[5:], _co.encode_value(1, "", TS_MS),
          TS_MS),),
        ((_co.encode_key("g", "t", -3), _co.encode_value(1, "", TS_MS), TS_MS),),
        ((_co.encode_key("g", "t", 0), _co.encode_value(-5, "", TS_MS), TS_MS),),
        ((_co.encode_key("g", "t", 0), _co.encode_value(5, "", -1), None),),
        ((_co.encode_group_key("g"), _co.encode_group_value([], generation=-5), TS_MS),),
    ))


# ---- librdkafka statistics -----------------------------------------------------------------

STATS_DOCS = [line for line in fixture_lines("client_stats/librdkafka-2.16.jsonl") if line.strip()]


def check_client_stats_document(text, as_bytes, ts_ms):
    got = client_stats.parse_client_stats(as_input(text, as_bytes), cluster=CLUSTER, ts_ms=ts_ms)
    if isinstance(got, Malformed):
        assert_reason(got, client_stats.SOURCE)
    else:
        assert isinstance(got, list), got
        for rec in got:
            assert_valid_record(rec, client_stats_table)


CLIENT_STATS_DOCUMENTS = FuzzProperty(
    "client_stats_documents", check_client_stats_document,
    (mutated_text(STATS_DOCS), st.booleans(), st.sampled_from([None, TS_MS])),
    max_examples=2500, examples=(
        # Found by this fuzzer: an integer of more digits than Python converts made
        # json.loads raise ValueError out of the parser; now Malformed oversize_number.
        ('{"name": "c#consumer-1", "time": ' + "9" * 5000 + "}", False, None),
        # Found by this fuzzer: "\ud800" in a string gave a record no sink can encode; now
        # bad_escape.
        ('{"name": "\\ud800c#consumer-1", "type": "consumer", "time": 1}', False, None),
        # Found by this fuzzer: a NaN statistic gave a record the sink cannot publish
        # (allow_nan=False).
        ('{"name": "c#consumer-1", "type": "consumer", "time": 1, "brokers": {"b": {"name": '
         '"b", "nodeid": 1, "rtt": {"p50": NaN}}}}', False, None),
        # JSON nested deeper than the decoder recurses: nested_too_deep.
        ('{"name": "c#consumer-1", "type": "consumer", "time": 1, "x": ' + "[" * 5000
         + "]" * 5000 + "}", False, None),
        # Accepted before the checks of schemas/plausible.py: a time of 1 s after 1970, a
        # negative error count.
        ('{"name": "c#consumer-1", "type": "consumer", "time": 1}', False, None),
        ('{"name": "c#consumer-1", "type": "consumer", "time": 1795343920, "brokers": {"b": '
         '{"name": "b", "nodeid": 1, "txerrs": -4}}}', False, None),
        # Found by bench_fuzz: a counter wider than 64 bits (a BIGINT column) was kept.
        ('{"name": "c#consumer-1", "type": "consumer", "time": 1795343920, "cgrp": '
         '{"rebalance_cnt": 9223372036854775808}}', False, None),
    ))


# ---- JMX exposition ------------------------------------------------------------------------

def _exposition_families() -> tuple[list[str], list[str]]:
    """(the kept families' text, one family each; some lines of families left out)."""
    body = gzip.open(FIXTURES / "jmx" / "kafka-4.3.1-broker-metrics.txt.gz").read().decode()
    kept, _ = jmx_scraper.kept_lines(body)
    families = [f"# HELP{block}" for block in kept.split("# HELP")[1:]]
    other = [line for line in body.splitlines()
             if line and not line.startswith("#") and line not in kept][::40]
    return families, other


JMX_FAMILIES, JMX_OTHER_LINES = _exposition_families()


@st.composite
def exposition(draw) -> str:
    parts = draw(st.lists(st.sampled_from(JMX_FAMILIES), min_size=1, max_size=4))
    parts += draw(st.lists(st.sampled_from(JMX_OTHER_LINES).map(lambda s: s + "\n"),
                           max_size=2))
    return "".join(draw(st.permutations(parts)))


@st.composite
def mutated_exposition(draw) -> str:
    text = draw(exposition())
    for _ in range(draw(st.integers(1, 4))):
        text = draw(_mutate_text(text))
    return text


def check_jmx_exposition(text, as_bytes):
    got = jmx_scraper.parse_exposition(as_input(text, as_bytes), cluster=CLUSTER, broker=1,
                                       ts_ms=TS_MS)
    if isinstance(got, Malformed):
        assert_reason(got, jmx_scraper.SOURCE)
        return
    assert isinstance(got, jmx_scraper.ParsedScrape), got
    for bad in got.malformed:
        assert_reason(bad, jmx_scraper.SOURCE)
    for rec in got.records:
        assert_valid_record(rec, broker_metrics)


JMX_EXPOSITIONS = FuzzProperty(
    "jmx_exposition", check_jmx_exposition, (mutated_exposition(), st.booleans()),
    max_examples=2000, examples=(
        # Found by bench_fuzz: an integer sample beyond the float range raised
        # OverflowError out of the parser; now skipped as a non-finite value.
        ("kafka_controller_controllerstats_uncleanleaderelectionspersec_count " + "9" * 400
         + "\n", False),
    ))

# ---- the tests: each property on the fixed profile, then with a fresh seed -------------------

PROPERTIES = (REQUEST_JSON_LINES, REQUEST_LEGACY_LINES, BROKER_LOG_EVENTS, CLIENT_LOG_LINES,
              CONSUMER_OFFSETS_RECORDS, CLIENT_STATS_DOCUMENTS, JMX_EXPOSITIONS)

test_request_log_json_lines_fuzzed = REQUEST_JSON_LINES.hypothesis_test()
test_request_log_legacy_text_lines_fuzzed = REQUEST_LEGACY_LINES.hypothesis_test()
test_broker_log_events_fuzzed = BROKER_LOG_EVENTS.hypothesis_test()
test_client_log_lines_fuzzed = CLIENT_LOG_LINES.hypothesis_test()
test_consumer_offsets_keys_and_values_fuzzed = CONSUMER_OFFSETS_RECORDS.hypothesis_test()
test_client_stats_documents_fuzzed = CLIENT_STATS_DOCUMENTS.hypothesis_test()
test_jmx_exposition_fuzzed = JMX_EXPOSITIONS.hypothesis_test()

test_request_log_json_lines_fresh_seed = REQUEST_JSON_LINES.hypothesis_test(fresh_seed=FUZZ_SEED)
test_request_log_legacy_text_lines_fresh_seed = REQUEST_LEGACY_LINES.hypothesis_test(
    fresh_seed=FUZZ_SEED)
test_broker_log_events_fresh_seed = BROKER_LOG_EVENTS.hypothesis_test(fresh_seed=FUZZ_SEED)
test_client_log_lines_fresh_seed = CLIENT_LOG_LINES.hypothesis_test(fresh_seed=FUZZ_SEED)
test_consumer_offsets_keys_and_values_fresh_seed = CONSUMER_OFFSETS_RECORDS.hypothesis_test(
    fresh_seed=FUZZ_SEED)
test_client_stats_documents_fresh_seed = CLIENT_STATS_DOCUMENTS.hypothesis_test(
    fresh_seed=FUZZ_SEED)
test_jmx_exposition_fresh_seed = JMX_EXPOSITIONS.hypothesis_test(fresh_seed=FUZZ_SEED)
