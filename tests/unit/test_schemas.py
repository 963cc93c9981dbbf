"""schemas/: every parser's record has exactly the columns its silver table declares.

Importing pyspark.sql.types starts no JVM, so these checks stay in the unit tier.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from pyspark.sql.types import StructType

from ingest.broker_log import parse_event
from ingest.client_log import parse_client_line
from ingest.client_stats import parse_client_stats
from ingest.consumer_offsets import encode_key, encode_value, parse_offset_record
from ingest.jmx_scraper import parse_exposition
from ingest.malformed import Malformed
from ingest.partition_offsets_agent import partition_offsets_record
from ingest.request_log import parse_request_line
from schemas import (broker_metrics, client_offset_events, client_send_windows, client_stats,
                     follower_fetch_windows, log_events, offset_commits, partition_offsets,
                     quarantine, request_exemplars, request_stages, request_windows)
from schemas.log_events import LogEventKind
from schemas.plausible import INT16, Bound, event_time, width
from tests.unit.captured import fixture_lines, line_containing

pytestmark = pytest.mark.unit

TABLES = [request_stages, log_events, client_offset_events, offset_commits, client_stats,
          quarantine, broker_metrics, partition_offsets]
# The edge aggregation's tables (issue 24), declared before the agent ships them: not
# registered streams yet.
WINDOW_TABLES = [request_windows, follower_fetch_windows, client_send_windows,
                 request_exemplars]


def request_record():
    return parse_request_line(fixture_lines("request_log/kafka-4.3.1-request.log")[0],
                              cluster="c", broker=1)


def log_event_record():
    return parse_event("[2026-11-22 10:39:32,243] INFO [Partition orders-2 broker=1] Shrinking "
                       "ISR from 2,3,1 to 1,2. (kafka.cluster.Partition)", cluster="c", broker=1)


def client_offset_record():
    return parse_client_line(line_containing("client_log/java-4.3.1.log", "Truncation detected"),
                             cluster="c")


def offset_commit_record():
    return parse_offset_record(encode_key("g", "t", 0),
                               encode_value(1, "", 1_795_343_920_000, version=3),
                               cluster="c")


def client_stats_records():
    return parse_client_stats(fixture_lines("client_stats/librdkafka-2.16.jsonl")[1], cluster="c")


def broker_metrics_records():
    text = ('kafka_network_requestmetrics_totaltimems{quantile="0.99",request="Produce"} 261.0\n'
            'kafka_log_logcleanermanager_uncleanable_bytes{logdirectory="/d"} 0.0\n')
    return parse_exposition(text, cluster="c", broker=1, ts_ms=1_795_343_920_000).records


def partition_offsets_records():
    rec = partition_offsets_record("c", 1_795_343_920_000, "t", 0, 0, 10, 1)
    rec.pop("record_id", None)
    return [rec]


def window_records() -> dict[str, list[dict]]:
    """What the edge aggregation makes of the captured request log, per stream, each
    without its record_id (silver adds that column)."""
    from ingest.request_windows import WindowAggregator
    lines = fixture_lines("request_log/kafka-4.3.1-request.log")
    recs = sorted((r for r in (parse_request_line(x, cluster="c", broker=1) for x in lines)
                   if isinstance(r, dict)), key=lambda r: r["ts_ms"])
    agg = WindowAggregator("c", 1, slow_ms=0.0, top_clients=1)   # every stream has rows
    for i, rec in enumerate(recs):
        agg.add(rec, (7, 100 * i))
    out: dict[str, list[dict]] = {}
    for o in agg.ready() + agg.flush_all():
        rec = dict(o.record)
        assert isinstance(rec.pop("record_id"), str)
        out.setdefault(o.stream, []).append(rec)
    return out


def quarantine_record():
    return Malformed("request_log", "empty_line", "").to_quarantine_record(
        cluster="c", ingest_ts_ms=1)


RECORDS = [
    ("request_log", request_stages, lambda: [request_record()]),
    ("broker_log", log_events, lambda: [log_event_record()]),
    ("client_log", client_offset_events, lambda: [client_offset_record()]),
    ("consumer_offsets", offset_commits, lambda: [offset_commit_record()]),
    ("client_stats", client_stats, client_stats_records),
    ("quarantine_from_malformed", quarantine, lambda: [quarantine_record()]),
    ("jmx", broker_metrics, broker_metrics_records),
    ("partition_offsets", partition_offsets, partition_offsets_records),
    *((t.__name__.split(".")[-1], t,
       lambda name=t.__name__.split(".")[-1]: window_records()[name]) for t in WINDOW_TABLES),
]


@pytest.mark.parametrize("table", TABLES, ids=[t.__name__.split(".")[-1] for t in TABLES])
def test_every_table_is_a_registered_stream_with_checks_that_name_its_columns(table):
    from jobs.streams import stream
    from jobs.validation import rules

    name = table.__name__.split(".")[-1]
    assert stream(name).table is table
    names = [r.name for r in rules(table)]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("table,make", [r[1:] for r in RECORDS], ids=[r[0] for r in RECORDS])
def test_record_fields_equal_the_schema_field_names_in_order(table, make):
    for rec in make():
        assert isinstance(rec, dict), rec
        assert list(rec) == table.SCHEMA.fieldNames()


@pytest.mark.parametrize("table", TABLES + WINDOW_TABLES,
                         ids=[t.__name__.split(".")[-1] for t in TABLES + WINDOW_TABLES])
def test_each_table_declares_schema_derived_columns_required_and_docs(table):
    assert isinstance(table.SCHEMA, StructType) and isinstance(table.SILVER_SCHEMA, StructType)
    assert table.SILVER_SCHEMA.fieldNames() == table.SCHEMA.fieldNames() + list(table.DERIVED)
    assert list(table.COLUMNS) == table.SILVER_SCHEMA.fieldNames()
    assert all(isinstance(doc, str) and doc for doc in table.COLUMNS.values())
    assert set(table.REQUIRED) <= set(table.SCHEMA.fieldNames())
    assert "cluster" in table.SCHEMA.fieldNames()
    assert table.__doc__


def test_window_records_fit_their_column_types():
    """Bucket ids fit SMALLINT, and a histogram's counts add up to its row's requests."""
    from core.latency_histogram import ZERO_BUCKET
    windows = window_records()
    assert set(windows) == {t.__name__.split(".")[-1] for t in WINDOW_TABLES}
    for name in ("request_windows", "follower_fetch_windows", "client_send_windows"):
        for rec in windows[name]:
            hists = [c[:-len("_buckets")] for c in rec if c.endswith("_buckets")]
            assert hists
            for h in hists:
                if rec[f"{h}_buckets"] is None:   # a client row's TotalTime: Produce only
                    assert (name, h) == ("client_send_windows", "total"), (name, h)
                    assert rec["api"] != "Produce" and rec["followed"] is None
                    continue
                assert all(ZERO_BUCKET <= b < 2 ** 15 for b in rec[f"{h}_buckets"])
                assert sum(rec[f"{h}_counts"]) == rec["requests"], (name, h)
            if name == "client_send_windows" and rec["api"] == "Produce":
                assert 0 <= rec["queued"] <= rec["followed"] <= rec["requests"], rec
    assert any(r["api"] == "Produce" for r in windows["client_send_windows"])


@pytest.mark.parametrize("table,make", [r[1:] for r in RECORDS], ids=[r[0] for r in RECORDS])
def test_captured_records_pass_their_tables_checks(table, make):
    """The plausibility bounds (schemas/plausible.py) hold for what real parsers and the
    edge aggregation make of captured telemetry."""
    from tests.unit.test_parser_fuzz import SQL_FUNCTIONS, _rules
    for rec in make():
        broken = [name for name, cond in _rules(table)
                  if not eval(cond, SQL_FUNCTIONS, dict(rec))]  # noqa: S307 - our own text
        assert not broken, (broken, rec)


@pytest.mark.parametrize("table", [t for t in TABLES + WINDOW_TABLES if t is not quarantine],
                         ids=[t.__name__.split(".")[-1] for t in TABLES + WINDOW_TABLES
                              if t is not quarantine])
def test_every_table_bounds_its_event_time(table):
    assert "implausible_event_time" in table.CHECKS


BOUND_CASES = [
    ("at_least_kept", Bound("negative_leader", ("leader",), low=-1), -1, None),
    ("at_least_broken", Bound("negative_leader", ("leader",), low=-1), -2,
     "negative_leader:leader"),
    ("null_passes", Bound("negative_leader", ("leader",), low=-1), None, None),
    ("between_broken_above", width(INT16, "leader"), 2 ** 15, "out_of_range:leader"),
    ("whole_rule_name", event_time("leader"), 5, "implausible_event_time"),
    ("elements_kept", Bound("negative_broker", ("leader",), low=0, elements=True), [0, 3], None),
    ("elements_empty", Bound("negative_broker", ("leader",), low=0, elements=True), [], None),
    ("elements_broken", Bound("negative_broker", ("leader",), low=0, elements=True), [2, -1],
     "negative_broker:leader"),
]


@pytest.mark.parametrize("bound,value,broken", [c[1:] for c in BOUND_CASES],
                         ids=[c[0] for c in BOUND_CASES])
def test_a_bounds_sql_and_parser_forms_agree(bound, value, broken):
    from tests.unit.test_parser_fuzz import SQL_FUNCTIONS, _python_condition
    rec = {"leader": value}
    assert bound.broken(rec) == broken
    sql_broken = [name for name, sql in bound.checks().items()
                  if not eval(_python_condition(sql), SQL_FUNCTIONS, rec)]  # noqa: S307
    assert sql_broken == ([broken] if broken else [])


def test_log_event_kinds_are_one_fixed_list():
    assert log_events.KINDS == tuple(k.value for k in LogEventKind)
    assert str(LogEventKind.UNCLEAN_ELECTION) == "unclean_election"
    assert LogEventKind("isr_shrink") is LogEventKind.ISR_SHRINK


def test_importing_schemas_starts_no_spark_context():
    # In a fresh interpreter: in a full run the spark tier's session already exists here.
    code = ("import schemas.request_stages, schemas.log_events, schemas.client_offset_events, "
            "schemas.offset_commits, schemas.client_stats, schemas.quarantine, "
            "schemas.broker_metrics\n"
            "from pyspark import SparkContext\n"
            "assert SparkContext._active_spark_context is None, 'a SparkContext was started'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
