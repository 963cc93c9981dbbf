"""register_tables on real Delta: a table name follows the lake it was last registered for.

The catalog lives as long as the session; CI's one session opens many lakes. Before this
test, a name registered by an earlier test kept pointing at that test's lake.
"""

from __future__ import annotations

from infra.lake import Lake, register_tables


def _write(spark, lake: Lake, rows: int) -> None:
    spark.range(rows).write.format("delta").save(lake.table("gold", "catalog_probe"))


def test_a_name_moves_to_the_lake_registered_last(spark, tmp_path):
    first, second = Lake(str(tmp_path / "one")), Lake(str(tmp_path / "two"))
    _write(spark, first, 3)
    _write(spark, second, 5)
    assert "gold.catalog_probe" in register_tables(spark, first)
    assert spark.sql("SELECT count(*) AS n FROM gold.catalog_probe").first()["n"] == 3
    register_tables(spark, second)
    assert spark.sql("SELECT count(*) AS n FROM gold.catalog_probe").first()["n"] == 5
    # Moving the name dropped no data of the first lake, and registering again is a no-op.
    assert spark.read.format("delta").load(first.table("gold", "catalog_probe")).count() == 3
    register_tables(spark, second)
    assert spark.sql("SELECT count(*) AS n FROM gold.catalog_probe").first()["n"] == 5


def test_a_table_whose_first_write_was_killed_is_not_named_until_a_write_creates_it(
        spark, tmp_path):
    """kill -9 during a table's first write leaves its folder with data files and an empty
    `_delta_log` (CI: the restarted `kmon run` failed on gold.remediation_decisions with
    DELTA_CREATE_EXTERNAL_TABLE_WITHOUT_TXN_LOG). The restart registers the other tables;
    the next write makes it version 0, without the orphaned file's rows."""
    import shutil
    from pathlib import Path

    lake = Lake(str(tmp_path / "lake"))
    _write(spark, lake, 3)
    half = Path(lake.table("gold", "half_written"))
    (half / "_delta_log").mkdir(parents=True)
    orphan = next(Path(lake.table("gold", "catalog_probe")).glob("*.parquet"))
    shutil.copy(orphan, half / orphan.name)
    (half / "_delta_log" / ".00000000000000000000.json.tmp").write_text("")

    assert register_tables(spark, lake) == ["gold.catalog_probe"]
    spark.range(2).write.format("delta").mode("append").save(str(half))
    assert sorted(register_tables(spark, lake)) == ["gold.catalog_probe", "gold.half_written"]
    assert spark.sql("SELECT count(*) AS n FROM gold.half_written").first()["n"] == 2
