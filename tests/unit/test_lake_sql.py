"""infra/lake_sql.py: a Delta table read without the JVM, kept up to date between reads."""

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from infra.lake import Lake
from infra.lake_sql import LakeSql, range_sql, utc_date

pytestmark = pytest.mark.unit

T0 = 1_767_225_600_000            # 2026-01-01T00:00:00Z


def _rows(ts: list[int], **extra) -> pa.Table:
    return pa.table({"ts_ms": pa.array(ts, pa.int64()),
                     "date": pa.array([utc_date(t) for t in ts], pa.date32()), **extra})


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_a_missing_table_reads_as_none_until_it_exists(tmp_path):
    clock = Clock()
    sql = LakeSql(Lake(str(tmp_path)), clock=clock)
    assert sql.dataset("silver", "x") is None
    assert sql.columns("silver", "x") == frozenset()
    write_deltalake(str(tmp_path / "silver" / "x"), _rows([T0]), partition_by=["date"])
    assert sql.dataset("silver", "x") is None        # within refresh_s: the same answer
    clock.t += 1.0
    assert sql.dataset("silver", "x").count_rows() == 1


def test_new_commits_and_columns_are_read_after_refresh_s(tmp_path):
    path = str(tmp_path / "silver" / "x")
    write_deltalake(path, _rows([T0, T0 + 1]), partition_by=["date"])
    clock = Clock()
    sql = LakeSql(Lake(str(tmp_path)), clock=clock)
    where, params = range_sql(T0, T0 + 86_400_000)
    count = "SELECT count(*) AS n FROM t WHERE " + where
    assert sql.rows(count, params, t=sql.dataset("silver", "x")) == [{"n": 2}]
    write_deltalake(path, _rows([T0 + 2], kind=pa.array(["a"])), mode="append",
                    schema_mode="merge")
    assert sql.rows(count, params, t=sql.dataset("silver", "x")) == [{"n": 2}]
    clock.t += 1.0
    ds = sql.dataset("silver", "x")
    assert sql.rows(count, params, t=ds) == [{"n": 3}]
    assert "kind" in sql.columns("silver", "x")
    # the older files read the new column as null
    assert sql.rows("SELECT ts_ms, kind FROM t ORDER BY ts_ms", t=ds) == [
        {"ts_ms": T0, "kind": None}, {"ts_ms": T0 + 1, "kind": None},
        {"ts_ms": T0 + 2, "kind": "a"}]


def test_the_range_condition_takes_the_days_of_both_ends(tmp_path):
    day = 86_400_000
    path = str(tmp_path / "silver" / "x")
    write_deltalake(path, _rows([T0 - 1, T0, T0 + day - 1, T0 + day]), partition_by=["date"])
    sql = LakeSql(Lake(str(tmp_path)))
    where, params = range_sql(T0 - 1, T0 + day)
    assert params[:2] == [dt.date(2025, 12, 31), dt.date(2026, 1, 2)]
    got = sql.rows(f"SELECT ts_ms FROM t WHERE {where} ORDER BY ts_ms", params,
                   t=sql.dataset("silver", "x"))
    assert [r["ts_ms"] for r in got] == [T0 - 1, T0, T0 + day - 1]


def test_a_ranged_dataset_holds_only_the_files_that_may_have_rows_of_the_range(tmp_path):
    path = str(tmp_path / "silver" / "x")
    # one file per 10 s of ts_ms, as a live table's micro-batches; a file across midnight
    day = 86_400_000
    for k in range(10):
        write_deltalake(path, _rows([T0 + k * 10_000, T0 + k * 10_000 + 9_999]),
                        partition_by=["date"], mode="append")
    write_deltalake(path, _rows([T0 - 5, T0 + day + 5]), partition_by=["date"], mode="append")
    sql = LakeSql(Lake(str(tmp_path)))
    ds = sql.dataset("silver", "x", start_ms=T0 + 25_000, end_ms=T0 + 50_000)
    files = sorted(f.path for f in ds.get_fragments())
    # 20-30 s, 30-40 s, 40-50 s; not 50-60 s (min = end: outside [start, end)), and
    # neither day of the midnight file (each day's part is a file of its own partition)
    assert len(files) == 3
    got = [r["ts_ms"] for r in sql.rows("SELECT ts_ms FROM t ORDER BY ts_ms", t=ds)]
    assert got == [T0 + 20_000, T0 + 29_999, T0 + 30_000, T0 + 39_999, T0 + 40_000,
                   T0 + 49_999]
    # the whole table without a range, and the date partition alone prunes too
    assert len(list(sql.dataset("silver", "x").get_fragments())) == 12
    assert len(list(sql.dataset("silver", "x", start_ms=T0 + day).get_fragments())) == 1
    # a range with no file: an empty scan of the table's columns, not None
    empty = sql.dataset("silver", "x", start_ms=T0 + 2 * day)
    assert empty.count_rows() == 0 and "ts_ms" in empty.schema.names
    assert sql.exists("silver", "x") and not sql.exists("silver", "y")


def test_a_file_without_statistics_is_kept(tmp_path):
    path = str(tmp_path / "silver" / "x")
    write_deltalake(path, _rows([T0]), partition_by=["date"],
                    configuration={"delta.dataSkippingNumIndexedCols": "0"})
    sql = LakeSql(Lake(str(tmp_path)))
    assert sql.dataset("silver", "x", start_ms=T0 + 1_000, end_ms=T0 + 2_000).count_rows() == 1


@pytest.mark.parametrize("root, uri", [
    ("/var/lib/kmon/lake", "/var/lib/kmon/lake"),
    ("s3a://kafka-monitoring/kmon", "s3://kafka-monitoring/kmon"),
    ("abfss://lake@acct.dfs.core.windows.net/kmon", "abfss://lake@acct.dfs.core.windows.net/kmon"),
    ("gs://bucket/kmon", "gs://bucket/kmon"),
])
def test_spark_lake_roots_map_to_delta_rs_addresses(root, uri):
    from infra.lake_sql import delta_uri
    assert delta_uri(root) == uri


def test_a_root_delta_rs_cannot_read_is_refused_at_once():
    from infra.lake_sql import delta_uri
    with pytest.raises(ValueError, match="hdfs:// lakes cannot be read by the detector"):
        delta_uri("hdfs://namenode:8020/kmon")
    with pytest.raises(ValueError, match="hdfs://"):
        LakeSql(Lake("hdfs://namenode:8020/kmon"))


def test_the_detector_query_refuses_such_a_root_naming_the_key():
    from core.config_keys import ConfigError
    from evaluation.detect import start_detector_query
    from kmon.config import load_config

    with pytest.raises(ConfigError, match=r"key 'spark.storage_root' \('hdfs://nn/kmon'\)"):
        start_detector_query(None, Lake("hdfs://nn/kmon"), load_config(None, environ={}))
