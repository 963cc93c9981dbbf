"""Compacted partitions' sizes, from the JMX exposition to the growing-partition rule.

Twenty minutes of a three-broker cluster, every partition on all three brokers, scraped
every 10 s: the exporter's `kafka_log_log_size` lines go through the scraper's parser
(ingest/jmx_scraper.py), the landing sink and the real bronze and silver jobs; the
cleaner's run summaries go through the broker-log parser the same way. Then
`read_inputs` builds the detector's inputs with compaction_lag.growth_window_s = 600 and
`run_detectors` applies the rules. Every partition grows ~0.15% a second (x2.5 over the
window: past the 100% a partition may grow between two cleanings at the default
min.cleanable.dirty.ratio 0.5), the replica on broker 2 a little larger than the others:

- __consumer_offsets-7 is never cleaned (and no topic config names it: Kafka always
  compacts it, so it is read anyway): consumer_offsets_not_compacted;
- users-0 (compacted) is cleaned on every broker 8 minutes before the end, in the
  window but before the detector's 300-s lookback, and shrinks: no finding;
- users-1 (compacted) was cleaned 15 minutes before the end, before the window, and has
  grown since: compacted_partition_growing;
- users-2 (compacted) is cleaned 8 minutes before the end but loses only 1% (its key
  space grows): no finding, which takes the cleaner runs of the whole window;
- carts-0 (compacted, max.compaction.lag.ms 60 s) is cleaned 105 s before the end and
  has grown since, past its 60 s and two 15-s backoffs: compacted_partition_growing, seen
  only in its sizes of 10 s (its contract step): the minute's last sample after the
  cleaning is 70 s before the end, too late;
- events-0 is not compacted: its sizes are never read.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from core.findings import AnomalyType, EntityKind
from detectors.compaction_lag import CompactedTopicConfig, detect_compaction_lag
from infra.lake import Lake
from ingest.broker_log import parse_lines
from ingest.jmx_scraper import parse_exposition, record_id
from ingest.sinks import LandingSink
from detectors.registry import run_detectors
from evaluation.inputs import (
    SIZE_STEP_S,
    TimeRange,
    contract_range,
    growth_range,
    read_inputs,
)
from jobs.pipeline import Pipeline
from jobs.streams import QUARANTINE, stream
from schemas.broker_metrics import LOG_SIZE

T0 = 1_767_225_600_000            # 2026-01-01T00:00:00Z, on the minute grid
SCRAPE_MS = 10_000
END = T0 + 20 * 60_000            # the evaluation time; the last scrape is 10 s before
WINDOW_S = 600                    # compaction_lag.growth_window_s in this test
CLUSTER = "c1"
BROKERS = {1: 0.97, 2: 1.0, 3: 0.98}   # broker -> its replica's share of the largest
PARTITIONS = (("__consumer_offsets", 7), ("users", 0), ("users", 1), ("users", 2),
              ("carts", 0), ("events", 0))
# (topic, partition) -> when every broker cleaned it, the share of its bytes it kept
CLEANED = {("users", 0): (END - 480_000, 0.4), ("users", 1): (END - 900_000, 0.4),
           ("users", 2): (END - 480_000, 0.99), ("carts", 0): (END - 105_000, 0.4)}
CARTS = CompactedTopicConfig(CLUSTER, "carts", max_compaction_lag_ms=60_000)
CONFIGS = [CompactedTopicConfig(CLUSTER, "users"), CARTS]
SERVER_LOG = Path(__file__).parent.parent / "fixtures" / "broker_log" / "kafka-4.3.1-server.log"


def size(topic: str, partition: int, broker: int, ts_ms: int) -> float:
    """A replica's bytes: growing 0.15% a second from 1 MB, cut once by a cleaning."""
    grown = 1e6 * 1.0015 ** ((ts_ms - T0) / 1000) * BROKERS[broker]
    cleaned_ms, kept = CLEANED.get((topic, partition), (None, 1.0))
    return round(grown * (kept if cleaned_ms is not None and ts_ms >= cleaned_ms else 1.0))


def scrape_ts() -> list[int]:
    return list(range(T0, END, SCRAPE_MS))


def metric_records() -> list[dict]:
    """What the scraper publishes from each broker's exposition, every scrape."""
    recs = []
    for ts in scrape_ts():
        for broker in BROKERS:
            body = "# TYPE kafka_log_log_size gauge\n" + "".join(
                f'{LOG_SIZE}{{partition="{p}",topic="{t}"}} {size(t, p, broker, ts)}\n'
                for t, p in PARTITIONS)
            parsed = parse_exposition(body, cluster=CLUSTER, broker=broker, ts_ms=ts)
            assert len(parsed.records) == len(PARTITIONS), parsed
            recs += [dict(r, record_id=record_id(r)) for r in parsed.records]
    return recs


def cleaner_run_records() -> list[dict]:
    """The cleaner's run summary (a real 4.3.1 one) for each cleaning, from every broker."""
    lines = SERVER_LOG.read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if "cleaned log compacted-keys-0" in x)
    event = lines[at - 1:at + 9]
    recs = []
    for (topic, partition), (ts, _) in CLEANED.items():
        stamp = dt.datetime.fromtimestamp(ts / 1000, tz=dt.timezone.utc)
        text = [event[0].replace(event[0][1:24], stamp.strftime("%Y-%m-%d %H:%M:%S,000")),
                *(x.replace("compacted-keys-0", f"{topic}-{partition}") for x in event[1:])]
        for broker in BROKERS:
            [rec] = parse_lines(text, cluster=CLUSTER, broker=broker, log="log-cleaner")
            assert isinstance(rec, dict) and rec["kind"] == "cleaner_run", rec
            recs.append(dict(rec, record_id=f"{CLUSTER}:{broker}:cleaner:{topic}-{partition}"))
    return recs


@pytest.fixture(scope="module")
def config(kmon_config):
    return kmon_config.with_overrides(compaction_lag={"growth_window_s": WINDOW_S})


@pytest.fixture(scope="module")
def lake(spark, kmon_config, tmp_path_factory) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("compaction-sizes") / "lake"))
    sink = LandingSink(lake.landing_root, "test")
    for name, records in (("broker_metrics", metric_records()),
                          ("log_events", cleaner_run_records())):
        for rec in records:
            sink.send(name, "k", rec)
    sink.flush()
    streams = tuple(stream(s) for s in ("broker_metrics", "log_events", QUARANTINE))
    Pipeline(spark, lake, kmon_config.pipeline, streams=streams).process_available()
    quarantined = spark.read.format("delta").load(lake.table("silver", QUARANTINE))
    assert quarantined.count() == 0, quarantined.select("source", "reason").limit(3).collect()
    return lake


@pytest.fixture(scope="module")
def inputs(spark, lake, config):
    return read_inputs(lake, config, END - 300_000, END, CONFIGS)


def test_one_size_per_compacted_replica_per_minute(inputs):
    r = growth_range(TimeRange(END - 300_000, END), WINDOW_S)
    assert r.start_ms == END - (WINDOW_S + 2 * SIZE_STEP_S) * 1000
    by_tp: dict[tuple[str, int], list] = {}
    for s in inputs.partition_sizes:
        by_tp.setdefault((s.topic, s.partition, s.broker), []).append(s)
    # Compacted only: users and carts from the configs, __consumer_offsets always; not
    # events.
    assert set(by_tp) == {(t, p, b) for t, p in (("__consumer_offsets", 7), ("users", 0),
                                                 ("users", 1), ("users", 2), ("carts", 0))
                          for b in BROKERS}
    step = SIZE_STEP_S * 1000
    minutes = range(r.start_ms, END, step)        # the range starts on a minute
    for (topic, partition, broker), series in by_tp.items():
        # The minute's last scrape (50 s into it), the replica's largest bytes in it.
        assert [(s.observed_ms, s.size_bytes) for s in series] == [
            (m + step - SCRAPE_MS, max(size(topic, partition, broker, m + k * SCRAPE_MS)
                                        for k in range(step // SCRAPE_MS)))
            for m in minutes], (topic, partition, broker)
        assert all(s.cluster == CLUSTER for s in series)


def test_a_short_promise_is_read_again_at_its_step_over_its_span(inputs):
    # 60 s / 6 = 10 s: one size per replica per scrape, carts only, over the promise, two
    # 15-s backoffs and two steps, from the minute before.
    r = contract_range(TimeRange(END - 300_000, END), CONFIGS, 15.0)
    assert r == TimeRange(END - 120_000, END)
    assert {(s.topic, s.partition) for s in inputs.contract_sizes} == {("carts", 0)}
    for broker in BROKERS:
        series = [s for s in inputs.contract_sizes if s.broker == broker]
        assert [(s.observed_ms, s.size_bytes) for s in series] == [
            (ts, size("carts", 0, broker, ts)) for ts in range(r.start_ms, END, SCRAPE_MS)]


def test_cleaner_runs_are_read_over_the_growth_window(inputs):
    # 8 minutes back: in the window's 12 minutes, not in the 5-minute range; users-1's
    # cleaning, 15 minutes back, is before the window.
    assert sorted({(c.topic, c.partition, c.end_ms) for c in inputs.cleaner_runs}) == [
        ("carts", 0, END - 105_000), ("users", 0, END - 480_000), ("users", 2, END - 480_000)]
    assert sorted(c.broker for c in inputs.cleaner_runs) == [1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_the_rule_fires_for_the_partitions_that_grow_uncleaned(inputs, config):
    found = {f.entity: f for f in run_detectors(inputs, config, END)
             if f.type is AnomalyType.COMPACTION_LAG and f.entity_kind is EntityKind.PARTITION}
    assert set(found) == {"__consumer_offsets-7", "users-1", "carts-0"}
    assert found["__consumer_offsets-7"].cause == "consumer_offsets_not_compacted"
    assert found["users-1"].cause == "compacted_partition_growing"
    # carts-0 from its first size of 10 s after the cleaning, 100 s before the last one
    assert found["carts-0"].cause == "compacted_partition_growing"
    assert found["carts-0"].evidence["window_ms"] == 90_000
    # Its sizes of the minute alone: the sample before the cleaning, or too recent.
    assert not [d for d in detect_compaction_lag(
        [], runs=inputs.cleaner_runs, topic_configs=CONFIGS, sizes=inputs.partition_sizes,
        config=config.compaction_lag) if d.entity == "carts-0"]
    evidence = found["__consumer_offsets-7"].evidence
    assert evidence["samples"] >= config.compaction_lag.growth_min_samples
    assert evidence["window_ms"] >= WINDOW_S * 1000
    assert evidence["growth_ratio"] > evidence["required_growth_ratio"] == 1.0


def test_without_topic_configs_only_consumer_offsets_is_read(spark, lake, config):
    bare = read_inputs(lake, config, END - 300_000, END)
    assert {(s.topic, s.partition) for s in bare.partition_sizes} == {("__consumer_offsets", 7)}
    assert bare.contract_sizes == []


def test_the_live_detectors_cached_history_reads_equal_whole_reads(spark, lake, config):
    """The live detector keeps the sizes, cleaner runs and cleaner gauges it read and
    reads again only the last HISTORY_REREAD_MS (evaluation/inputs/__init__.py
    `_incremental`): evaluated every 20 s over the last five minutes, as the detector
    query does, each gives what a whole read of the growth window gives, while the sizes
    read cover about three minutes of the window's twelve."""
    from evaluation.inputs import WindowReadCache

    cache = WindowReadCache()
    compared = 0
    for now in range(END - 300_000 + 7_000, END + 1, 20_000):
        got = read_inputs(lake, config, now - 300_000, now, CONFIGS, window_cache=cache)
        want = read_inputs(lake, config, now - 300_000, now, CONFIGS)
        for name in ("partition_sizes", "contract_sizes", "cleaner_runs", "cleaner_gauges"):
            assert getattr(got, name) == getattr(want, name), (name, now)
        compared += len(want.partition_sizes) + len(want.contract_sizes) + len(want.cleaner_runs)
        name = next(k for k in cache.windows_read if k.startswith("partition_sizes"))
        assert now == END - 300_000 + 7_000 or cache.windows_read[name] <= 180_000
    assert compared > 500
