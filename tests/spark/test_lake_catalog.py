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
