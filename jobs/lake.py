"""Where kmon's Delta tables and checkpoints live, and their names in the Spark SQL catalog.

Layout under ``storage_root`` (local disk, s3a://, abfss://, hdfs://):

    landing/<stream>/        JSON-lines files from the agents (embedded mode only)
    bronze/<stream>/         raw values + source coordinates, one table per stream
    silver/<stream>/         typed, validated rows (schemas/)
    silver/quarantine/       every rejected input with the rule it broke
    gold/<table>/            windowed aggregates
    _checkpoints/<query>/    one folder per streaming query

Tables are registered as ``bronze.<stream>``, ``silver.<stream>``, ``gold.<table>`` so an
engineer can query them by name (`register_tables`).
"""

from __future__ import annotations

from dataclasses import dataclass

LAYERS = ("bronze", "silver", "gold")


@dataclass(frozen=True)
class Lake:
    root: str

    def _join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def landing_root(self) -> str:
        return self._join("landing")

    def landing(self, stream: str) -> str:
        return self._join("landing", stream)

    def table(self, layer: str, name: str) -> str:
        if layer not in LAYERS:
            raise ValueError(f"unknown layer {layer!r}; layers: {', '.join(LAYERS)}")
        return self._join(layer, name)

    def checkpoint(self, query: str) -> str:
        return self._join("_checkpoints", query)


def register_tables(spark, lake: Lake) -> list[str]:
    """Register every Delta table that exists under the lake as <layer>.<name>."""
    from py4j.protocol import Py4JJavaError  # noqa: F401 - imported for callers' except

    registered = []
    jvm = spark.sparkContext._jvm
    hconf = spark.sparkContext._jsc.hadoopConfiguration()
    for layer in LAYERS:
        base = jvm.org.apache.hadoop.fs.Path(lake.table(layer, ""))
        fs = base.getFileSystem(hconf)
        if not fs.exists(base):
            continue
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {layer}")
        for status in fs.listStatus(base):
            name = status.getPath().getName()
            if not fs.exists(jvm.org.apache.hadoop.fs.Path(status.getPath(), "_delta_log")):
                continue
            spark.sql(f"CREATE TABLE IF NOT EXISTS {layer}.{name} USING DELTA "
                      f"LOCATION '{lake.table(layer, name)}'")
            registered.append(f"{layer}.{name}")
    return registered
