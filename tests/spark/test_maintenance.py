"""Table maintenance (jobs/maintenance.py) on real Delta tables written the way the
streaming queries write them: many small appends. A closed day is Z-ordered once and
recorded; the open day's small files are packed; the rows never change; a MERGE-written
table is left alone while kmon runs; VACUUM frees the replaced files."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from infra.lake import Lake
from jobs.maintenance import LOG_TABLE, Maintenance, closed_days, zorder_columns
from jobs.maintenance_config import MaintenanceSection

DAY1, DAY2 = "2026-11-25", "2026-11-26"
# 06:00 on DAY2: DAY1 closed (ended 6 h ago, closed_after_h 1), DAY2 open.
NOW_MS = int(datetime(2026, 11, 26, 6, tzinfo=timezone.utc).timestamp() * 1000)


def _minutes(spark, day: str, batch: int):
    start = int(datetime.fromisoformat(day).replace(tzinfo=timezone.utc).timestamp()) + batch * 60
    return (spark.range(0, 40).select(
        F.lit("c1").alias("cluster"), (F.col("id") % 20).cast("int").alias("broker"),
        F.timestamp_seconds(F.lit(start)).alias("window_start"),
        (F.col("id") * 1.5 + batch).alias("total_p99_ms"))
        .withColumn("date", F.to_date("window_start")))


@pytest.fixture()
def lake(spark, tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    path = lake.table("gold", "request_stages_1m")
    for day in (DAY1, DAY2):
        for batch in range(4):
            _minutes(spark, day, batch).write.format("delta").mode("append") \
                .partitionBy("date").save(path)
    _minutes(spark, DAY2, 0).write.format("delta").save(lake.table("gold", "anomalies"))
    return lake


def _files(spark, path, day=None):
    df = spark.read.format("delta").load(path)
    if day:
        df = df.where(F.col("date") == day)
    return df.select(F.input_file_name()).distinct().count()


def _rows(spark, path):
    return sorted(map(tuple, spark.read.format("delta").load(path).collect()))


def test_closed_days_and_zorder_columns():
    assert closed_days([DAY1, DAY2, "__HIVE_DEFAULT_PARTITION__"], NOW_MS, 1.0) == [DAY1]
    assert closed_days([DAY1], NOW_MS, 6.0) == [DAY1]
    assert closed_days([DAY1], NOW_MS, 6.5) == []
    assert zorder_columns(["cluster", "broker", "ts_ms", "ts"]) == ("broker", "ts_ms")
    assert zorder_columns(["cluster", "broker", "window_start"]) == ("broker", "window_start")
    assert zorder_columns(["cluster", "window_start", "key"]) == ()


def test_a_pass_zorders_the_closed_day_once_packs_the_open_one_and_keeps_every_row(spark, lake):
    path = lake.table("gold", "request_stages_1m")
    before = _rows(spark, path)
    assert _files(spark, path, DAY1) >= 4 and _files(spark, path, DAY2) >= 4
    m = Maintenance(spark, lake, MaintenanceSection(), live=True, clock=lambda: NOW_MS)
    out = {o.table: o for o in m.run()}
    stages = out["gold.request_stages_1m"]
    assert stages.zordered == [DAY1] and stages.compacted == [DAY2] and not stages.errors
    assert _files(spark, path, DAY1) == 1 and _files(spark, path, DAY2) == 1
    assert _rows(spark, path) == before
    assert stages.files_after == 2 < stages.files_before
    # The findings table (written by MERGE) is not rewritten while kmon runs.
    assert out["gold.anomalies"].zordered == out["gold.anomalies"].compacted == []
    log = spark.read.format("delta").load(lake.table("gold", LOG_TABLE))
    assert log.where("operation = 'zorder' AND partition = '2026-11-25'").count() == 1

    # Appends go on; the next pass packs the open day again and leaves DAY1 as it is.
    _minutes(spark, DAY2, 7).write.format("delta").mode("append").partitionBy("date").save(path)
    _minutes(spark, DAY2, 8).write.format("delta").mode("append").partitionBy("date").save(path)
    again = {o.table: o for o in m.run(only=["gold.request_stages_1m"])}
    assert again["gold.request_stages_1m"].zordered == []
    assert again["gold.request_stages_1m"].compacted == [DAY2]
    assert _files(spark, path, DAY2) == 1
    assert list(again) == ["gold.request_stages_1m"]


def test_vacuum_frees_the_files_a_pass_replaced(spark, lake):
    """With a retention shorter than the files' age (0 h here, which the configuration
    refuses: a test can wait no hour) the replaced small files leave the disk."""
    path = lake.table("gold", "request_stages_1m")
    Maintenance(spark, lake, MaintenanceSection(vacuum_retain_h=1), clock=lambda: NOW_MS).run()
    m = Maintenance(spark, lake, MaintenanceSection(vacuum_retain_h=0), clock=lambda: NOW_MS)
    o = {o.table: o for o in m.run(only=["gold.request_stages_1m"])}["gold.request_stages_1m"]
    assert not o.errors and o.disk_bytes_after < o.disk_bytes_before
    data = [p for p in Path(path).rglob("*.parquet") if "_delta_log" not in p.parts]
    assert len(data) == 2                     # one file per day left on disk


def test_the_configured_retention_is_the_one_vacuum_applies(spark, lake):
    """Delta 4 ignores VACUUM's retention argument (other than 0) for the table's own
    deletedFileRetentionDuration. Here that property says 0 (delete every replaced file at
    once) and [maintenance] says 1 h: the files the pass just replaced stay on disk."""
    path = lake.table("gold", "request_stages_1m")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
              "('delta.deletedFileRetentionDuration' = 'interval 0 hours')")
    before = len([p for p in Path(path).rglob("*.parquet") if "_delta_log" not in p.parts])
    m = Maintenance(spark, lake, MaintenanceSection(vacuum_retain_h=1), clock=lambda: NOW_MS)
    o = {o.table: o for o in m.run(only=["gold.request_stages_1m"])}["gold.request_stages_1m"]
    assert not o.errors and o.files_after == 2      # one file per day in the table
    after = [p for p in Path(path).rglob("*.parquet") if "_delta_log" not in p.parts]
    assert len(after) == before + 2                 # the 8 replaced files are still there


def test_a_retention_that_rounds_to_zero_hours_vacuums_nothing():
    from jobs.maintenance import vacuum_hours

    assert [vacuum_hours(h) for h in (0, 0.5, 1, 1.4, 168)] == [0, 1, 1, 1, 168]
    with pytest.raises(ValueError, match="rounds to 0 h"):
        vacuum_hours(0.45)


def test_all_rewrites_the_merge_tables_too(spark, lake):
    path = lake.table("gold", "anomalies")
    for _ in range(3):
        _minutes(spark, DAY2, 1).write.format("delta").mode("append").save(path)
    o = {o.table: o for o in Maintenance(spark, lake, MaintenanceSection(), live=False,
                                         clock=lambda: NOW_MS).run()}["gold.anomalies"]
    assert o.compacted == ["(table)"] and o.files_after == 1


def test_a_pass_while_a_stream_appends_and_another_reads_loses_and_repeats_nothing(
        spark, tmp_path):
    """Safe with the streams running: a streaming query appends to a table every second
    while a second one reads it as a stream (as the gold queries read silver), and two
    passes compact it meanwhile. Neither query fails, and every row the writer wrote is
    in the table and in the reader's copy exactly once."""
    import time

    lake = Lake(str(tmp_path / "lake"))
    path, copy = lake.table("silver", "ticks"), lake.table("gold", "ticks_copy")
    source = (spark.readStream.format("rate").option("rowsPerSecond", 200).load()
              .select(F.col("value").alias("id"), F.lit(3).alias("broker"),
                      (F.unix_millis("timestamp")).alias("ts_ms"),
                      F.to_date("timestamp").alias("date")))
    writer = (source.writeStream.format("delta").partitionBy("date")
              .option("checkpointLocation", str(tmp_path / "cp-writer"))
              .trigger(processingTime="1 second").start(path))
    reader = None
    try:
        deadline = time.monotonic() + 60
        while not (Path(path) / "_delta_log").exists() or \
                len(list(Path(path).rglob("*.parquet"))) < 4:
            assert time.monotonic() < deadline, "the writer wrote nothing"
            time.sleep(0.5)
        reader = (spark.readStream.format("delta").load(path).writeStream.format("delta")
                  .option("checkpointLocation", str(tmp_path / "cp-reader"))
                  .trigger(processingTime="1 second").start(copy))
        m = Maintenance(spark, lake, MaintenanceSection(), live=True)
        passes = [m.run(only=["silver.ticks"]) for _ in range(2)]
        assert all(not o.errors for p in passes for o in p)
        assert any(o.compacted for p in passes for o in p)
        time.sleep(3)
    finally:
        writer.stop()
    assert reader is not None
    reader.processAllAvailable()
    reader.stop()
    assert writer.exception() is None and reader.exception() is None
    ids = [r["id"] for r in spark.read.format("delta").load(path).select("id").collect()]
    assert len(ids) == len(set(ids)) and sorted(ids) == list(range(len(ids)))
    copied = [r["id"] for r in spark.read.format("delta").load(copy).select("id").collect()]
    assert sorted(copied) == sorted(ids)


def landing_file(folder: Path, name: str, first: int, age_h: float) -> Path:
    """Ten JSON lines {"n": first..first+9} in `folder`/`name`, last modified `age_h` hours
    before NOW_MS."""
    import os

    p = folder / name
    p.write_text("".join(f'{{"n": {first + i}}}\n' for i in range(10)))
    t = NOW_MS / 1000 - age_h * 3600
    os.utime(p, (t, t))
    return p


def test_landing_files_go_once_a_committed_batch_read_them_and_they_are_old(spark, tmp_path):
    """The file source's real checkpoint: files a committed batch read and older than
    landing_retain_h are deleted; a file no batch read, and a recent one, stay; the query
    restarted after the deletion reads the new file only, and no row is lost or repeated."""

    from jobs.bronze import from_landing

    lake = Lake(str(tmp_path / "lake"))
    folder = Path(lake.landing("broker_metrics"))
    folder.mkdir(parents=True)

    def write(name: str, first: int, age_h: float = 0) -> Path:
        return landing_file(folder, name, first, age_h)

    def run_once() -> None:
        q = (from_landing(spark, lake, ["broker_metrics"]).select("value").writeStream
             .format("delta").option("checkpointLocation", lake.checkpoint("silver"))
             .trigger(availableNow=True).start(lake.table("silver", "lines")))
        q.awaitTermination()
        assert q.exception() is None

    old_a, old_b = write("a.jsonl", 0, age_h=30), write("b.jsonl", 10, age_h=30)
    recent = write("c.jsonl", 20, age_h=1)
    run_once()
    unread = write("d.jsonl", 30, age_h=30)      # old, but no batch has read it yet
    m = Maintenance(spark, lake, MaintenanceSection(landing_retain_h=24), clock=lambda: NOW_MS)
    m.run()
    (out,) = m.landing
    assert (out.stream, out.files_before, out.files_deleted) == ("broker_metrics", 4, 2)
    assert not old_a.exists() and not old_b.exists() and recent.exists() and unread.exists()
    log = spark.read.format("delta").load(lake.table("gold", LOG_TABLE)) \
        .where("operation = 'landing'").first()
    assert (log["table"], log["files_before"], log["files_after"], log["files_removed"]) == \
        ("landing/broker_metrics", 4, 2, 2)

    run_once()
    values = [r["value"] for r in spark.read.format("delta")
              .load(lake.table("silver", "lines")).collect()]
    assert sorted(values) == sorted(f'{{"n": {i}}}' for i in range(40))

    m.run()                                       # d.jsonl read now, and old: it goes too
    assert not unread.exists() and recent.exists()
    assert Maintenance(spark, lake, MaintenanceSection(prune_landing=False),
                       clock=lambda: NOW_MS + 10**9).run() is not None
    assert recent.exists()


def test_tables_keep_their_log_for_the_configured_time(spark, lake, kmon_config):
    from infra.spark_session import log_retention

    def retention(path):
        return {r["key"]: r["value"] for r in
                spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
                }.get("delta.logRetentionDuration")

    want = log_retention(kmon_config.spark.delta_log_retention_h)
    path = lake.table("gold", "request_stages_1m")
    assert retention(path) == want == "interval 10080 minutes"     # made by this session
    spark.sql(f"ALTER TABLE delta.`{path}` UNSET TBLPROPERTIES ('delta.logRetentionDuration')")
    assert retention(path) is None                                  # a table made before
    Maintenance(spark, lake, MaintenanceSection(), live=True, clock=lambda: NOW_MS,
                log_retention_h=168).run()
    assert retention(path) is None                # not while kmon runs
    Maintenance(spark, lake, MaintenanceSection(), live=False, clock=lambda: NOW_MS,
                log_retention_h=168).run()
    assert retention(path) == want


def test_tables_keep_statistics_for_the_columns_reads_skip_by(spark, lake, tmp_path):
    """A table kmon creates keeps min/max statistics for its cluster, broker and time
    columns only; `kmon maintain --all` sets the same on a table made before."""
    import json

    from evaluation.detect import ensure_anomalies_table
    from schemas.anomalies import ANOMALY_SCHEMA

    def file_stats(path):
        return [json.loads(json.loads(line)["add"]["stats"])
                for f in sorted(Path(path, "_delta_log").glob("*.json"))
                for line in f.read_text().splitlines() if '"add"' in line]

    def stats_columns(path):
        return {r["key"]: r["value"] for r in
                spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
                }.get("delta.dataSkippingStatsColumns")

    made = str(tmp_path / "anomalies")
    ensure_anomalies_table(spark, made)
    assert stats_columns(made) == "cluster,first_seen_ms,last_seen_ms"
    row = {f.name: None for f in ANOMALY_SCHEMA.fields} | {
        "finding_id": "f1", "cluster": "c1", "type": "slow_broker", "first_seen_ms": NOW_MS,
        "last_seen_ms": NOW_MS, "status": "open", "resolved_ms": NOW_MS}
    (spark.createDataFrame([row], ANOMALY_SCHEMA).write.format("delta").mode("append")
     .save(made))
    assert [set(s["minValues"]) for s in file_stats(made)] == [
        {"cluster", "first_seen_ms", "last_seen_ms"}]

    path = lake.table("gold", "request_stages_1m")      # written here, no property
    assert stats_columns(path) is None and "total_p99_ms" in file_stats(path)[0]["minValues"]
    Maintenance(spark, lake, MaintenanceSection(), live=True, clock=lambda: NOW_MS).run()
    assert stats_columns(path) is None                # not while kmon runs
    Maintenance(spark, lake, MaintenanceSection(), live=False, clock=lambda: NOW_MS).run()
    assert stats_columns(path) == "cluster,broker,window_start"
    ops = {(r["table"], r["operation"]) for r in
           spark.read.format("delta").load(lake.table("gold", LOG_TABLE)).collect()}
    assert ("gold.request_stages_1m", "stats_columns") in ops


def test_the_source_log_forgets_the_landing_files_a_pass_deleted(spark, tmp_path):
    """Spark's compacted source log lists every file a query ever read. After a pass
    deletes old landing files, no compacted log lists them, the files still there keep
    their entries, the next compaction starts from the shorter list, and the query
    restarted on it reads every file exactly once."""

    from jobs.bronze import from_landing
    from jobs.landing_retention import normalized, source_log_entries

    lake = Lake(str(tmp_path / "lake"))
    folder = Path(lake.landing("broker_metrics"))
    folder.mkdir(parents=True)
    log_dir = Path(lake.checkpoint("silver")) / "sources" / "0"

    def write(name: str, first: int, age_h: float = 0) -> Path:
        return landing_file(folder, name, first, age_h)

    def run_once() -> None:
        q = (from_landing(spark, lake, ["broker_metrics"], max_files_per_trigger=1)
             .select("value").writeStream.format("delta")
             .option("checkpointLocation", lake.checkpoint("silver"))
             .trigger(availableNow=True).start(lake.table("silver", "lines")))
        q.awaitTermination()
        assert q.exception() is None

    def compacted() -> dict[str, set[str]]:
        return {p.name: {normalized(path) for path, _ in source_log_entries(p.read_text())}
                for p in log_dir.glob("*.compact")}

    key = "spark.sql.streaming.fileSource.log.compactInterval"
    spark.conf.set(key, "2")          # a compaction every second batch: batches 1, 3, 5...
    try:
        old = [write(f"{c}.jsonl", 10 * i, age_h=40 - i) for i, c in enumerate("abcd")]
        recent = write("e.jsonl", 40, age_h=1)
        run_once()                    # batches 0-4, a file each; 1.compact and 3.compact
        before = compacted()
        assert set(before) == {"1.compact", "3.compact"}
        assert before["3.compact"] == {normalized(p.as_uri()) for p in old}

        m = Maintenance(spark, lake, MaintenanceSection(landing_retain_h=24),
                        clock=lambda: NOW_MS)
        m.run()
        assert not any(p.exists() for p in old) and recent.exists()
        assert m.landing_forgotten == 2 + 4          # a, b in 1.compact; a-d in 3.compact
        assert compacted() == {"1.compact": set(), "3.compact": set()}

        later = [write("f.jsonl", 50, age_h=30), write("g.jsonl", 60, age_h=0.5)]
        run_once()                    # batches 5, 6: 5.compact from 3.compact, 4 and 5
        assert compacted()["5.compact"] == {normalized(p.as_uri())
                                            for p in (recent, later[0])}
        run_once()                    # nothing new: e, f, g are remembered, not read again
    finally:
        spark.conf.unset(key)
    values = [r["value"] for r in spark.read.format("delta")
              .load(lake.table("silver", "lines")).collect()]
    assert sorted(values) == sorted(f'{{"n": {i}}}' for i in range(70))
