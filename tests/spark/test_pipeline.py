"""The bronze -> silver -> gold pipeline over landing files: validation, quarantine, late rows,
repeats, constraints and the great-expectations suite, on real Spark and Delta."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from infra.lake import Lake
from ingest.request_log import parse_request_line
from ingest.request_windows import aggregate
from ingest.sinks import LandingSink
from jobs.pipeline import Pipeline
from jobs.silver import BATCHES_TABLE
from jobs.streams import QUARANTINE, stream
from jobs.validation import validate_with_great_expectations
from schemas import request_stages

FIXTURE = Path(__file__).parent.parent / "fixtures" / "request_log" / "kafka-4.3.1-request.log"


def _records() -> list[dict]:
    out = []
    for i, line in enumerate(FIXTURE.read_text().splitlines()):
        rec = parse_request_line(line, cluster="c1", broker=1)
        if rec:
            rec["record_id"] = f"c1:1:fixture:{i}"
            out.append(rec)
    return out


@pytest.fixture()
def lake(tmp_path) -> Lake:
    return Lake(str(tmp_path / "lake"))


def _pipeline(spark, lake, kmon_config, on_batch=None):
    return Pipeline(spark, lake, kmon_config.pipeline, on_batch=on_batch,
                    streams=(stream("request_stages"), stream(QUARANTINE)))


def test_valid_rows_reach_silver_and_gold_bad_rows_reach_quarantine(spark, lake, kmon_config):
    good = _records()
    assert len(good) > 20
    sink = LandingSink(lake.landing_root, "test")
    for r in good:
        sink.send("request_stages", "k", r)
    # repeats of the same record id (an agent re-sending after a crash)
    for r in good[:5]:
        sink.send("request_stages", "k", r)
    # and repeats from a writer that puts the id last: the same key by the JSON path
    id_last = [json.dumps({k: v for k, v in r.items() if k != "record_id"}
                          | {"record_id": r["record_id"]}) for r in good[5:8]]
    bad = [
        dict(good[0], record_id="bad-negative", local_ms=-3.0),
        dict(good[0], record_id="bad-api", api_key=4242),
        {k: v for k, v in good[0].items() if k != "total_ms"} | {"record_id": "bad-missing"},
        dict(good[0], record_id="bad-type", broker="not-a-number"),
    ]
    for r in bad:
        sink.send("request_stages", "k", r)
    # and the windows the agent sends for the same lines (gold's stage minutes)
    for o in aggregate([dict(r, record_id=f"c1:1:1:{i}") for i, r in enumerate(good)],
                       "c1", 1):
        if o.stream == "request_windows":
            sink.send(o.stream, "k", o.record)
    sink.flush()
    landing = Path(lake.landing("request_stages"))
    (landing / "garbage.jsonl").write_text('{"cluster": "c1", "ts_ms": 1\nnot json at all\n')
    (landing / "id-last.jsonl").write_text("\n".join(id_last) + "\n")
    pipeline = Pipeline(spark, lake, kmon_config.pipeline,
                        streams=(stream("request_stages"), stream("request_windows"),
                                 stream(QUARANTINE)))
    pipeline.process_available()

    silver = spark.read.format("delta").load(lake.table("silver", "request_stages"))
    assert silver.count() == len(good)
    assert silver.select("record_id").distinct().count() == len(good)
    q = spark.read.format("delta").load(lake.table("silver", QUARANTINE))
    reasons = {r["reason"]: r["n"] for r in q.groupBy("reason").agg(F.count("*").alias("n")).collect()}
    assert reasons == {"negative_time:local_ms": 1, "unknown_api": 1, "missing_field:total_ms": 1,
                       "wrong_type": 1, "not_json": 2}
    assert q.where("source = 'silver.request_stages'").count() == 6
    raw = q.where("reason = 'unknown_api'").first()["raw"]
    assert json.loads(raw)["api_key"] == 4242

    batches = spark.read.format("delta").load(lake.table("gold", BATCHES_TABLE)).where(
        "stream = 'request_stages'").agg(F.sum("rows_in").alias("i"), F.sum("rows_valid").alias("v"),
                                         F.sum("rows_quarantined").alias("q")).first()
    assert (batches["i"], batches["v"], batches["q"]) == (len(good) + 6, len(good), 6)

    gold = spark.read.format("delta").load(lake.table("gold", "request_stages_1m"))
    # Minutes close only when the watermark passes them; the newest stay open.
    direct = (silver.where("NOT is_controller_traffic")
              .groupBy(F.window("ts", "1 minute").alias("w"), "broker", "api").count())
    assert 0 < gold.count() <= direct.count()


def test_a_batch_writes_one_file_per_date_to_a_silver_table(spark, lake, kmon_config):
    # Rows spread over every shuffle partition of the dedupe (4 in the test session):
    # without the coalesce each would write a file of its own, and a live table would
    # gain ~4 small files every 10 s (jobs/silver.py ROWS_PER_FILE).
    assert int(spark.conf.get("spark.sql.shuffle.partitions")) > 1
    sink = LandingSink(lake.landing_root, "test")
    good = _records()
    for r in good:
        sink.send("request_stages", "k", r)
    sink.flush()
    _pipeline(spark, lake, kmon_config).process_available()
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{lake.table('silver', 'request_stages')}`").first()
    dates = spark.read.format("delta").load(lake.table("silver", "request_stages")) \
        .select("date").distinct().count()
    assert detail["numFiles"] == dates


def test_rows_later_than_the_bound_are_quarantined_and_within_it_counted(spark, lake, kmon_config):
    base = _records()[0]
    t = base["ts_ms"]
    sink = LandingSink(lake.landing_root, "test")
    sink.send("request_stages", "k", dict(base, record_id="new", ts_ms=t))
    sink.flush()
    stats: list[dict] = []
    pipeline = _pipeline(spark, lake, kmon_config, on_batch=stats.append)
    pipeline.process_available()
    lateness_ms = stream("request_stages").lateness_s * 1000
    sink.send("request_stages", "k", dict(base, record_id="late-ok", ts_ms=t - lateness_ms // 2))
    sink.send("request_stages", "k", dict(base, record_id="too-late", ts_ms=t - lateness_ms - 1000))
    sink.flush()
    pipeline.process_available()
    silver = spark.read.format("delta").load(lake.table("silver", "request_stages"))
    assert sorted(r["record_id"] for r in silver.collect()) == ["late-ok", "new"]
    q = spark.read.format("delta").load(lake.table("silver", QUARANTINE)).collect()
    assert [(r["record_id"], r["reason"]) for r in q] == [("too-late", "late_beyond_watermark")]
    late = (spark.read.format("delta").load(lake.table("gold", BATCHES_TABLE))
            .where("stream = 'request_stages'")
            .agg(F.sum("rows_late_within_bound").alias("i"),
                 F.sum("rows_late_beyond_bound").alias("o")).first())
    assert (late["i"], late["o"]) == (1, 1)
    # what the detector's window cache is told silver wrote: the oldest valid row's time
    # of each batch (the quarantined row is not in silver)
    assert [x["low_ms"] for x in stats if x["stream"] == "request_stages"] == [
        t, t - lateness_ms // 2]


def test_lateness_is_per_broker_and_a_future_row_moves_nothing(spark, lake, kmon_config):
    """One broker's clock (or one line) ahead must not make another broker's rows late:
    a row stamped far ahead of its ingest time is quarantined and moves no high water, and
    each broker's rows are late only against that broker's own newest row. The per-broker
    high water survives a restart (read back from gold.pipeline_batches)."""
    base = _records()[0]
    t = base["ts_ms"]
    lateness_ms = stream("request_stages").lateness_s * 1000
    sink = LandingSink(lake.landing_root, "test")
    sink.send("request_stages", "k", dict(base, record_id="b1-new", ts_ms=t))
    sink.send("request_stages", "k", dict(base, record_id="b2-old", broker=2,
                                          ts_ms=t - 3 * lateness_ms))
    # a line from the year 2030 on broker 2
    sink.send("request_stages", "k", dict(base, record_id="b2-2030", broker=2,
                                          ts_ms=1_900_000_000_000))
    sink.flush()
    stats: list[dict] = []
    _pipeline(spark, lake, kmon_config, on_batch=stats.append).process_available()
    # broker 2 goes on from where it was (3 bounds behind broker 1), and broker 1 sends a
    # row later than its own bound
    sink.send("request_stages", "k", dict(base, record_id="b2-next", broker=2,
                                          ts_ms=t - 3 * lateness_ms + 1000))
    sink.send("request_stages", "k", dict(base, record_id="b1-too-late",
                                          ts_ms=t - lateness_ms - 1000))
    sink.flush()
    _pipeline(spark, lake, kmon_config, on_batch=stats.append).process_available()

    silver = spark.read.format("delta").load(lake.table("silver", "request_stages"))
    assert sorted(r["record_id"] for r in silver.collect()) == ["b1-new", "b2-next", "b2-old"]
    q = spark.read.format("delta").load(lake.table("silver", QUARANTINE)).collect()
    assert sorted((r["record_id"], r["reason"]) for r in q) == [
        ("b1-too-late", "late_beyond_watermark"), ("b2-2030", "future_event_time")]
    first = next(x for x in stats if x["stream"] == "request_stages")
    assert first["source_high_water"] == {"c1/1": t, "c1/2": t - 3 * lateness_ms}
    # the 2030 row's lead is what the exporter reports for broker 2: its clock is ahead
    assert first["source_lead_ms"]["c1/2"] > 100 * 86_400_000
    assert first["source_lead_ms"]["c1/1"] < 0


def test_agent_quarantine_records_land_in_the_quarantine_table(spark, lake, kmon_config):
    bad = parse_request_line(b"\xff\xfe garbage", cluster="c1", broker=2)
    rec = bad.to_quarantine_record(cluster="c1", ingest_ts_ms=1_700_000_000_000, broker=2,
                                   origin="/var/log/kafka/kafka-request.log")
    rec["record_id"] = "c1:2:9:0"
    sink = LandingSink(lake.landing_root, "test")
    sink.send(QUARANTINE, "k", rec)
    sink.flush()
    _pipeline(spark, lake, kmon_config).process_available()
    rows = spark.read.format("delta").load(lake.table("silver", QUARANTINE)).collect()
    assert len(rows) == 1
    assert (rows[0]["source"], rows[0]["reason"], rows[0]["broker"]) == ("request_log", bad.reason, 2)


def test_silver_table_has_delta_constraints_that_reject_invalid_rows(spark, lake, kmon_config):
    _pipeline(spark, lake, kmon_config).ensure_tables()
    path = lake.table("silver", "request_stages")
    props = {r["key"] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()}
    assert "delta.constraints.kmon_negative_time_local_ms" in props
    assert "delta.constraints.kmon_missing_field_cluster" in props
    row = spark.read.format("delta").load(path).limit(0).schema
    bad = spark.createDataFrame([{f.name: None for f in row.fields}], row)
    with pytest.raises(Exception, match="(?i)constraint|CHECK"):
        bad.write.format("delta").mode("append").save(path)


def test_great_expectations_suite_passes_on_silver_and_fails_on_bad_rows(spark, lake, kmon_config):
    sink = LandingSink(lake.landing_root, "test")
    for r in _records():
        sink.send("request_stages", "k", r)
    sink.flush()
    _pipeline(spark, lake, kmon_config).process_available()
    silver = spark.read.format("delta").load(lake.table("silver", "request_stages"))
    ok = validate_with_great_expectations(silver, "request_stages", request_stages)
    assert ok.success, ok.failures
    broken = silver.withColumn("local_ms", F.lit(-1.0)).union(silver)
    result = validate_with_great_expectations(broken, "request_stages", request_stages)
    assert not result.success
    assert any("local_ms" in f for f in result.failures), result.failures


def test_rows_of_a_stream_outside_the_query_fail_the_batch_naming_them(spark, lake, kmon_config):
    """A source that reads more than its query's streams (a topic pattern or folder glob
    gone wrong) must stop the query, not drop those rows quietly."""
    from jobs import bronze, silver

    sink = LandingSink(lake.landing_root, "test")
    for r in _records()[:3]:
        sink.send("request_stages", "k", r)
    sink.send(QUARANTINE, "k", {"cluster": "c1", "record_id": "q-1", "reason": "x"})
    sink.flush()
    pipeline = _pipeline(spark, lake, kmon_config)
    pipeline.ensure_tables()
    raw = bronze.with_ingest_time(bronze.from_landing(spark, lake, ["request_stages", QUARANTINE]))
    q = silver.start_silver(spark, lake, (stream("request_stages"),), raw, query="narrow",
                            trigger={"availableNow": True}, bronze_tables=False)
    with pytest.raises(Exception, match=r"1 rows of streams not in this query \(quarantine"):
        q.awaitTermination()
    assert spark.read.format("delta").load(lake.table("silver", "request_stages")).count() == 0


def test_the_offset_lag_table_exists_before_any_end_offset_arrives(spark, lake, kmon_config):
    """The README's lag query must work on a lake whose pipeline has not yet seen a
    partition_offsets row (a short run): the table is created, empty, at start."""
    from delta.tables import DeltaTable

    pipeline = Pipeline(spark, lake, kmon_config.pipeline,
                        streams=(stream("offset_commits"), stream("partition_offsets")))
    pipeline.process_available()
    path = lake.table("gold", "offset_lag_1m")
    assert DeltaTable.isDeltaTable(spark, path)
    table = spark.read.format("delta").load(path)
    assert table.count() == 0
    assert {"lag", "committed_below_start", "date"} <= set(table.columns)


def test_a_lake_written_before_a_column_was_added_takes_the_new_rows(spark, lake, kmon_config):
    """silver.request_stages as an older kmon created it (without the OffsetCommit columns):
    the pipeline adds the missing columns at start and appends the new rows."""
    from delta.tables import DeltaTable

    new_columns = ("group_id", "member_id", "generation", "committed")
    pipeline = _pipeline(spark, lake, kmon_config)
    pipeline.ensure_tables()
    path = lake.table("silver", "request_stages")
    full = spark.read.format("delta").load(path).schema
    old = [f for f in full.fields if f.name not in new_columns]
    assert len(old) == len(full.fields) - len(new_columns)
    import shutil
    shutil.rmtree(path)
    from jobs.silver import partition_columns
    DeltaTable.create(spark).location(path).addColumns(old).partitionedBy(
        *partition_columns(stream("request_stages"))).execute()

    sink = LandingSink(lake.landing_root, "test")
    commits = [r for r in _records() if r["api"] == "OffsetCommit"] or _records()[:1]
    for r in commits:
        sink.send("request_stages", "k", r)
    sink.flush()
    _pipeline(spark, lake, kmon_config).process_available()

    silver = spark.read.format("delta").load(path)
    names = [f.name for f in silver.schema.fields]
    assert sorted(names) == sorted(f.name for f in full.fields)
    assert names[-len(new_columns):] == list(new_columns)   # added at the end
    assert silver.count() == len(commits)
    if any(r["api"] == "OffsetCommit" for r in commits):
        assert silver.where("group_id IS NOT NULL").count() > 0


def test_a_lake_made_before_a_log_event_kind_was_added_takes_rows_of_the_new_kind(
        spark, lake, kmon_config):
    """silver.log_events with the kind constraint of an older kmon (no broker_fenced): the
    pipeline replaces the constraint at start, and a controller's fencing line lands."""
    from delta.tables import DeltaTable

    from jobs.silver import partition_columns
    from jobs.validation import constraint_properties
    from schemas import log_events

    pipeline = Pipeline(spark, lake, kmon_config.pipeline, streams=(stream("log_events"),))
    pipeline.ensure_tables()
    path = lake.table("silver", "log_events")
    schema = spark.read.format("delta").load(path).schema
    import shutil
    shutil.rmtree(path)
    old_kinds = [k for k in log_events.KINDS if not k.startswith("broker_")]
    builder = DeltaTable.create(spark).location(path).addColumns(schema).partitionedBy(
        *partition_columns(stream("log_events")))
    for key, value in constraint_properties(log_events).items():
        if key.endswith("kmon_unknown_kind"):
            value = "coalesce(kind IN (" + ", ".join(f"'{k}'" for k in old_kinds) + "), false)"
        builder = builder.property(key, value)
    builder.execute()

    sink = LandingSink(lake.landing_root, "test")
    sink.send("log_events", "k", {
        "cluster": "local", "broker": 3, "ts_ms": 1795673910728, "log": "controller",
        "level": "INFO", "logger": "org.apache.kafka.controller.ReplicationControlManager",
        "message": "[QuorumController id=3] Fencing broker 2 at epoch 11 because its session "
                   "has timed out.", "message_truncated": False, "kind": "broker_fenced",
        "subject_broker": 2})
    sink.flush()
    Pipeline(spark, lake, kmon_config.pipeline, streams=(stream("log_events"),)
             ).process_available()
    rows = spark.read.format("delta").load(path).where("kind = 'broker_fenced'").collect()
    assert [(r["subject_broker"], r["broker"]) for r in rows] == [(2, 3)]


def test_the_silver_query_runs_in_the_pool_that_goes_first(spark, lake, kmon_config):
    # Two task slots shared by every query: the silver query's jobs run in the pool that
    # has a slot of its own whenever it has tasks (infra/resources/spark-fair-pools.xml).
    sink = LandingSink(lake.landing_root, "test")
    for r in _records()[:5]:
        sink.send("request_stages", "k", r)
    sink.flush()
    pools = []
    pipeline = _pipeline(spark, lake, kmon_config, on_batch=lambda _row: pools.append(
        spark.sparkContext.getLocalProperty("spark.scheduler.pool")))
    pipeline.process_available()
    assert pools and set(pools) == {"silver"}, pools
    silver = spark.sparkContext._jsc.sc().getPoolForName("silver").get()
    background = spark.sparkContext._jsc.sc().getPoolForName("background").get()
    assert (silver.weight(), silver.minShare()) == (3, 1)
    assert (background.weight(), background.minShare()) == (1, 0)
    # the thread that started the queries is back in the default pool
    assert spark.sparkContext.getLocalProperty("spark.scheduler.pool") is None
