"""Every registered stream's silver table can be created and decodes a record of its own schema
(catches column clashes such as a record with a `value` column)."""

from infra.lake import Lake
from jobs.pipeline import Pipeline
from jobs.streams import STREAMS


def test_every_stream_has_a_silver_table_with_its_columns(spark, kmon_config, tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    p = Pipeline(spark, lake, kmon_config.pipeline, streams=STREAMS)   # both modes' streams
    p.ensure_tables()
    for s in p.streams:
        cols = spark.read.format("delta").load(lake.table("silver", s.name)).columns
        assert cols == s.table.SILVER_SCHEMA.fieldNames() + ["record_id", "date"], s.name
