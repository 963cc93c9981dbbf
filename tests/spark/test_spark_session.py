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
