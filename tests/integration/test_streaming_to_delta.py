"""The Spark Kafka source reads the real local cluster into a Delta table."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer

from tests.integration.test_local_cluster import create_topic


def test_stream_from_kafka_into_delta(kafka_cluster, spark, kmon_config, tmp_path):
    topic = f"stream-{uuid.uuid4().hex[:6]}"
    create_topic(kafka_cluster, topic, partitions=3)
    p = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all"})
    for i in range(2_000):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert p.flush(60) == 0

    table = f"{kmon_config.storage_root}/it_stream_{topic}"
    query = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
             .option("subscribe", topic)
             .option("startingOffsets", "earliest")
             .load()
             .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                         "topic", "partition", "offset", "timestamp")
             .writeStream.format("delta")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True)
             .start(table))
    assert query.awaitTermination(180), "streaming query did not finish within 180 s"
    assert query.exception() is None, query.exception()

    df = spark.read.format("delta").load(table)
    assert df.count() == 2_000
    assert df.select("key").distinct().count() == 2_000
    assert {r.partition for r in df.select("partition").distinct().collect()} == {0, 1, 2}
    assert df.where("value = 'v1999' AND key = 'k1999'").count() == 1
