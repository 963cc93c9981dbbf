"""The session factory builds a real local SparkSession with Delta and the Kafka source."""

from __future__ import annotations

from pyspark.testing import assertDataFrameEqual


def test_delta_round_trip(spark, kmon_config):
    path = f"{kmon_config.storage_root}/roundtrip"
    df = spark.createDataFrame([(1, "Produce", 12.5), (2, "Fetch", 501.0)],
                               "broker INT, api STRING, total_ms DOUBLE")
    df.write.format("delta").mode("overwrite").save(path)
    assertDataFrameEqual(spark.read.format("delta").load(path), df)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert history[0]["operation"] == "WRITE"


def test_session_settings_come_from_config(spark, kmon_config):
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.master") == kmon_config.spark.master
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.conf.get("spark.sql.extensions") == "io.delta.sql.DeltaSparkSessionExtension"
    assert "spark-sql-kafka-0-10" in conf.get("spark.jars")
    # The Kafka source's provider class is loadable from the session's classpath.
    jvm = spark.sparkContext._jvm
    assert jvm.java.lang.Class.forName(
        "org.apache.spark.sql.kafka010.KafkaSourceProvider", True,
        jvm.Thread.currentThread().getContextClassLoader()) is not None


def test_python_workers_run_kmons_interpreter(tmp_path):
    """A local session's Python workers run the driver's interpreter, not the first python3
    on the PATH (PySpark refuses a worker of another Python version, and only kmon's
    interpreter has its libraries). Its own process: PYSPARK_PYTHON is read when the
    SparkContext starts, and the PATH here holds a python3 that cannot run a worker."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").write_text("#!/bin/sh\necho 'not the python3 kmon runs' >&2\nexit 3\n")
    (shim / "python3").chmod(0o755)
    script = (
        "import sys\n"
        "from infra.spark_session import build_spark_session\n"
        "from kmon.config import load_config\n"
        f"lake = {str(tmp_path / 'lake')!r}\n"
        "config = load_config().with_overrides(spark={'storage_root': lake})\n"
        "spark = build_spark_session(config)\n"
        "rows = spark.createDataFrame([(1,), (2,)], 'x INT').collect()\n"
        "seen = spark.sparkContext.parallelize([0], 1).map(lambda _: sys.executable).collect()\n"
        "spark.stop()\n"
        "print('ROWS', len(rows)); print('WORKER', seen[0]); print('DRIVER', sys.executable)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON",
                                                             "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(repo)
    done = subprocess.run([sys.executable, "-c", script], cwd=repo, env=env, text=True,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines()
                 if line.split(" ", 1)[0] in ("ROWS", "WORKER", "DRIVER"))
    assert lines["ROWS"] == "2"
    assert lines["WORKER"] == lines["DRIVER"] == sys.executable
