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
# The columns Delta keeps min/max statistics for in the tables kmon creates (those of them a
# table has): the cluster, the broker and the time columns, what readers' range filters and
# the Z-order of closed days (jobs/maintenance.py) skip files by. Delta's default, the
# first 32 columns, spent a third of a silver micro-batch's task time on statistics no
# reader skips by: a corpus recording's one batch (181,000 rows) took 21 s with them,
# 14 s without; the demo's 60-s batches 10-15% less (bench/bench_silver_batch.py). Set per
# table at its creation: as a session default, a table without one of the columns refuses
# every later ALTER of its properties (DELTA_COLUMN_NOT_FOUND_IN_SCHEMA).
DATA_SKIPPING_COLUMNS = ("cluster", "broker", "ts_ms", "window_start", "window_end", "ts",
                         "first_seen_ms", "last_seen_ms")
STATS_COLUMNS_PROPERTY = "delta.dataSkippingStatsColumns"


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


def skipping_properties(columns, partition_columns=()) -> dict[str, str]:
    """The table properties of a new table with these columns (a schema's field names):
    statistics for the DATA_SKIPPING_COLUMNS it has that it is not partitioned by (Delta
    refuses those: a partition is skipped by its value); none when it has none of them
    (Delta's default stays: such tables are small). Pass them as writer options or
    builder properties when the table is created."""
    have = set(columns) - set(partition_columns)
    kept = [c for c in DATA_SKIPPING_COLUMNS if c in have]
    return {STATS_COLUMNS_PROPERTY: ",".join(kept)} if kept else {}


def delta_tables(spark, lake: Lake) -> list[tuple[str, str, str]]:
    """(layer, name, fully qualified location) of every Delta table under the lake."""
    found = []
    jvm = spark.sparkContext._jvm
    hconf = spark.sparkContext._jsc.hadoopConfiguration()
    for layer in LAYERS:
        base = jvm.org.apache.hadoop.fs.Path(lake.table(layer, ""))
        fs = base.getFileSystem(hconf)
        if not fs.exists(base):
            continue
        for status in fs.listStatus(base):
            if _has_commit(fs, jvm.org.apache.hadoop.fs.Path(status.getPath(), "_delta_log")):
                found.append((layer, status.getPath().getName(), status.getPath().toString()))
    return sorted(found)


def _is_commit_file(name: str) -> bool:
    """A Delta log file that makes a version: ``<20 digits>.json`` or a checkpoint."""
    stem = name.split(".", 1)[0]
    return stem.isdigit() and (name.endswith(".json") or ".checkpoint" in name)


def _has_commit(fs, log_dir) -> bool:
    """A `_delta_log` folder holding at least one version. A writer killed during a table's
    first write leaves the folder empty (or only a temporary file): that is no table yet,
    and naming it in the catalog fails (DELTA_CREATE_EXTERNAL_TABLE_WITHOUT_TXN_LOG). The
    next write creates it as version 0."""
    if not fs.exists(log_dir):
        return False
    return any(_is_commit_file(s.getPath().getName()) for s in fs.listStatus(log_dir))


def partition_values(spark, location: str, column: str) -> list[str]:
    """The values of a partition column that have a folder under the table (a cheap
    listing: no Delta log, no data; a folder whose files were all removed may remain)."""
    jvm = spark.sparkContext._jvm
    base = jvm.org.apache.hadoop.fs.Path(location)
    fs = base.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    prefix = f"{column}="
    return sorted(s.getPath().getName()[len(prefix):] for s in fs.listStatus(base)
                  if s.isDirectory() and s.getPath().getName().startswith(prefix))


def register_tables(spark, lake: Lake) -> list[str]:
    """Register every Delta table that exists under the lake as <layer>.<name>.

    Each is registered at its fully qualified location: a relative lake root
    (``.kmon/demo-replay/lake``) registered as written was resolved by the catalog to a
    place with no Delta log, and the table could not be read by name.
    """
    registered, tables = [], delta_tables(spark, lake)
    for layer in sorted({layer for layer, _, _ in tables}):
        spark.sql(f"CREATE SCHEMA IF NOT EXISTS {layer}")
    for layer, name, location in tables:
        _register(spark, f"{layer}.{name}", location)
        registered.append(f"{layer}.{name}")
    return registered


def _register(spark, table: str, location: str) -> None:
    """Name the Delta table at `location`; a name left pointing at another lake is moved.

    The catalog outlives one lake in a session (a test session, a notebook that opened two
    lakes): `CREATE TABLE IF NOT EXISTS` alone would keep the old location and every query
    by name would silently read the other lake. The tables are external, so dropping the
    name drops no data.
    """
    if spark.catalog.tableExists(table):
        try:
            current = spark.sql(f"DESCRIBE DETAIL {table}").first()["location"]
        except Exception:  # noqa: BLE001 - its old location is gone: the name is stale
            current = None
        if current is not None and _same_location(current, location):
            return
        spark.sql(f"DROP TABLE {table}")
    spark.sql(f"CREATE TABLE {table} USING DELTA LOCATION '{location}'")


def _same_location(a: str, b: str) -> bool:
    """file:/x, file:///x and /x are one place; other schemes compare as written."""
    def norm(uri: str) -> str:
        if uri.startswith("file:"):
            uri = "/" + uri.removeprefix("file:").lstrip("/")
        return uri.rstrip("/")
    return norm(a) == norm(b)
