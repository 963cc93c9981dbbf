"""The one place a SparkSession is built.

Local mode by default; the master, the storage root and any extra settings come from
configuration, so the same jobs run on a Spark cluster with Delta on object storage by
changing conf/kmon.toml only. Delta's SQL extensions and catalog are always on, and the
Kafka source plus Delta jars resolved by `infra.jvm_deps` are put on the classpath.

On a fleet the jars can instead be provided by the cluster (spark.jars.packages or the
image); set ``spark.extra_conf = {"kmon.provided_jars" = "true"}`` to skip adding them.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from core.config_keys import _key
from infra.jvm_deps import JvmDeps, JvmSection


@dataclass(frozen=True)
class SparkSection:
    master: str = _key("Spark master: local[N] embedded, or spark://, yarn, k8s://... on a fleet",
                       "local[2]")
    app_name: str = _key("Spark application name", "kmon")
    storage_root: str = _key("Root of the Delta lake and checkpoints; empty means <work_dir>/lake. "
                             "On a fleet: s3a://bucket/kmon, abfss://..., gs://... (not hdfs://: the detector "
                             "reads the lake in its own process with delta-rs, which has no "
                             "HDFS store; credentials from the AWS_*/AZURE_*/GOOGLE_* "
                             "environment)", "")
    shuffle_partitions: int = _key("spark.sql.shuffle.partitions", 4, min=1, max=100000)
    driver_memory: str = _key("spark.driver.memory (local mode: the whole Spark heap)", "2g")
    ui_enabled: bool = _key("Start the Spark UI (off by default in the embedded mode)", False)
    log_level: str = _key("Spark's own log level", "WARN",
                          choices=("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"))
    codegen: str = _key("Compile each query to JVM bytecode (whole-stage codegen): on, off, or "
                        "auto (off with a local master). Off runs every query interpreted: no "
                        "compile per new plan, the better trade for the many small queries of "
                        "one machine (a plan's times are literals in its code, so each detector "
                        "evaluation and micro-batch compiled anew); keep it on for a cluster's "
                        "large batches", "auto", choices=("auto", "on", "off"))
    delta_log_retention_h: float = _key(
        "How long the Delta tables kmon creates keep their commit log "
        "(delta.logRetentionDuration; Delta's default is 30 days, about 260,000 log files for "
        "a table written every 10 s): time travel and a stopped stream's restart reach back "
        "this far. Keep it at or above maintenance.vacuum_retain_h. `kmon maintain --all` "
        "sets it on tables made before", 168.0, min=1, max=24 * 365 * 10)
    extra_conf: dict = _key("Extra Spark settings passed as-is, e.g. "
                            "{\"spark.hadoop.fs.s3a.endpoint\" = \"...\"}", {})

log = logging.getLogger(__name__)

_LOG4J2 = Path(__file__).parent / "resources" / "spark-log4j2.properties"
_POOLS = Path(__file__).parent / "resources" / "spark-fair-pools.xml"
# Local mode: G1's concurrent threads compete with the tasks on a small machine; the
# throughput collector with two threads leaves that CPU to the queries. The optimizing JIT
# (C2) stays: C1 alone (tried earlier to save compile time) made a silver micro-batch of
# the demo's telemetry ~30% slower once warm (bench/bench_silver_batch.py: 17-20 s vs
# 12-14 s for 60 s of telemetry).
_LOCAL_JVM_OPTIONS = ["-XX:ReservedCodeCacheSize=256m",
                      "-XX:+UseParallelGC", "-XX:ParallelGCThreads=2"]


def spark_log_file(work_dir: Path) -> Path:
    """Spark's driver log: the console shows none of it (log4j2 rolls it at 20 MB)."""
    return Path(work_dir) / "logs" / "spark.log"


def _local_path(root: str) -> bool:
    """A lake on this machine's disk (a plain path or file:), not on object storage/HDFS."""
    from urllib.parse import urlparse

    return urlparse(root).scheme in ("", "file")


def log_retention(hours: float) -> str:
    """delta.logRetentionDuration's value for `hours` (whole minutes)."""
    return f"interval {max(1, round(hours * 60))} minutes"


class SparkConfig(Protocol):
    """The parts of kmon's configuration a session is built from (kmon.config.Config)."""

    spark: SparkSection
    jvm: JvmSection

    @property
    def work_dir(self) -> Path: ...

    @property
    def storage_root(self) -> str: ...


def spark_conf(config: SparkConfig, jars: list[Path]) -> dict[str, str]:
    """Every setting the session is built with (pure, so it can be checked without a JVM)."""
    s = config.spark
    root = config.storage_root
    conf = {
        "spark.master": s.master,
        "spark.app.name": s.app_name,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": str(s.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.warehouse.dir": f"{root.rstrip('/')}/warehouse",
        "spark.ui.enabled": str(s.ui_enabled).lower(),
        "spark.driver.memory": s.driver_memory,
        # Streaming state stays bounded and off the JVM heap.
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.databricks.delta.optimizeWrite.enabled": "true",
        "spark.driver.extraJavaOptions": " ".join([f"-Dlog4j2.configurationFile=file:{_LOG4J2}",
                                                   f"-Dkmon.spark.log="
                                                   f"{spark_log_file(config.work_dir)}",
                                                   *(_LOCAL_JVM_OPTIONS
                                                     if s.master.startswith("local") else [])]),
        "spark.ui.showConsoleProgress": "false",
        # every Delta table this session creates
        "spark.databricks.delta.properties.defaults.logRetentionDuration":
            log_retention(s.delta_log_retention_h),
    }
    if s.master.startswith("local"):
        # Delta rebuilds table state with 50 tasks by default: right for a cluster,
        # pure overhead on two local cores.
        conf["spark.databricks.delta.snapshotPartitions"] = "2"
        # A dozen streaming queries share two task slots: fair scheduling between pools
        # (spark-fair-pools.xml) runs the silver query's tasks first, then the detector
        # evaluation's short jobs (evaluation/detect.py), between the others' tasks instead
        # of queueing behind them.
        conf["spark.scheduler.mode"] = "FAIR"
        conf["spark.scheduler.allocation.file"] = str(_POOLS)
        # optimizeWrite adds a shuffle to every write to make big files: on one machine
        # the micro-batches are small and that shuffle is a fixed cost per batch.
        conf["spark.databricks.delta.optimizeWrite.enabled"] = "false"
    if _local_path(root):
        # Hadoop's local file system forks a process for every readlink and chmod it makes
        # through the FileContext API (no native library from Maven): Spark's streaming
        # checkpoint files, Delta's commit and checksum files each made two. The
        # FileSystem API makes neither, and on a local disk its rename is as atomic.
        conf["spark.sql.streaming.checkpointFileManagerClass"] = (
            "org.apache.spark.sql.execution.streaming.checkpointing."
            "FileSystemBasedCheckpointFileManager")
        conf["spark.delta.logStore.file.impl"] = "io.delta.storage.LocalLogStore"
    if s.codegen == "off" or (s.codegen == "auto" and s.master.startswith("local")):
        # Interpreted: Janino compiling generated code was a third of the busy driver's
        # samples in the demo (jstack), because plans carry their times as literals and
        # every detector evaluation and micro-batch compiled new classes. Interpreted, an
        # evaluation took 3.4-4.8 s instead of 5.4-6.7 s and a silver micro-batch 3.8 s
        # instead of 4.7 s (bench/bench_detect_eval.py --advance 20, bench_silver_batch.py).
        # factoryMode is internal to Spark; 4.1 honours it outside tests too.
        conf["spark.sql.codegen.wholeStage"] = "false"
        conf["spark.sql.codegen.factoryMode"] = "NO_CODEGEN"
    extra = {k: str(v) for k, v in s.extra_conf.items()}
    if jars and extra.pop("kmon.provided_jars", "false").lower() != "true":
        conf["spark.jars"] = ",".join(str(j) for j in jars)
    conf.update(extra)
    return conf


def build_spark_session(config: SparkConfig, jvm_deps: JvmDeps | None = None):
    """Build (or return the running) SparkSession for this configuration."""
    from pyspark.sql import SparkSession

    if config.jvm.java_home:
        os.environ["JAVA_HOME"] = config.jvm.java_home
    if config.spark.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers (a DataFrame made from Python rows) run kmon's own interpreter,
        # not the first python3 on the PATH: PySpark refuses a worker of another Python
        # version, and only kmon's has its libraries. On a cluster the workers' Python
        # is the cluster's (PYSPARK_PYTHON or spark.pyspark.python).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")  # pandas-on-Spark warns otherwise
    deps = jvm_deps or JvmDeps(config.work_dir, config.jvm.maven_repo, config.jvm.offline)
    jars = deps.ensure("spark")
    builder = SparkSession.builder
    for k, v in spark_conf(config, jars).items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(config.spark.log_level)
    if not config.spark.master.startswith("local"):
        # addPyFile also puts the zip on this process's sys.path, ahead of the installed
        # kmon (whose modules read files beside them): the driver keeps its own.
        path = list(sys.path)
        session.sparkContext.addPyFile(str(ship_code(Path(config.work_dir))))
        sys.path[:] = path
    # What the JVM prints on its standard output (Delta's VACUUM says "Deleted N files ...")
    # goes where its logs go: standard error, which `kmon run` keeps in a file. kmon's own
    # console output is Python's, on the Python side.
    jvm_system = session.sparkContext._jvm.java.lang.System
    jvm_system.setOut(jvm_system.err)
    log.info("Spark %s session on %s, lake at %s", session.version, config.spark.master,
             config.storage_root)
    return session


# The packages the pipeline's Python workers may import (jobs and the floors below it).
WORKER_PACKAGES = ("core", "schemas", "infra", "ingest", "detectors", "dashboards", "jobs")


def ship_code(work_dir: Path) -> Path:
    """A zip of kmon's packages that Spark's Python workers import (the gold minute
    rollup runs kmon's functions there), for `addPyFile` on a cluster, whose executors do
    not have kmon installed; a local session's workers import it from the driver's
    environment. Rewritten at every start, so the executors run the driver's code."""
    import zipfile

    root = Path(__file__).resolve().parent.parent
    out = work_dir / "kmon-worker-code.zip"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for package in WORKER_PACKAGES:
            for f in sorted((root / package).rglob("*.py")):
                z.write(f, f.relative_to(root).as_posix())
    tmp.replace(out)
    return out
