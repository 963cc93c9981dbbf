"""`kmon demo`: the main job on its embedded default.

Today it runs the foundation slice end to end, all real parts: a local 3-broker KRaft
cluster from the Apache jars, a workload (acks=all and acks=1 producers, a consumer group,
a compacted topic), the request log agent publishing to the landing folder, the bronze and
silver Delta jobs, stage percentiles per broker and API in gold, and the workload topic
streamed into Delta through the Spark Kafka source. Fault injection and findings join as
the detectors land (issue 6).
"""

from __future__ import annotations

import sys
import threading
import time

from prometheus_client import CollectorRegistry

from kmon.config import Config

TOTAL_STEPS = 7


class Progress:
    """Numbered steps with elapsed time, so nobody wonders whether it hung."""

    def __init__(self, total: int, out=sys.stdout):
        self.total, self.n, self.t0, self.out = total, 0, time.monotonic(), out

    def step(self, text: str) -> None:
        self.n += 1
        print(f"[{self.n}/{self.total}] {text}  (+{time.monotonic() - self.t0:.0f}s)",
              file=self.out, flush=True)

    def note(self, text: str) -> None:
        print(f"      {text}", file=self.out, flush=True)


def _workload(cluster, messages: int, progress: Progress, duration_s: float = 15.0) -> dict:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topics = [NewTopic("orders", 6, 3, config={"min.insync.replicas": "2"}),
              NewTopic("clicks", 6, 3),
              NewTopic("customers", 3, 3, config={"cleanup.policy": "compact",
                                                   "segment.ms": "10000",
                                                   "min.cleanable.dirty.ratio": "0.01"})]
    for t, f in admin.create_topics(topics).items():
        f.result(60)
    time.sleep(1)  # leaders elected
    bs = cluster.bootstrap_servers
    all_acks = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "client.id": "orders-producer"})
    one_ack = Producer({"bootstrap.servers": bs, "acks": "1", "linger.ms": 5,
                        "client.id": "clicks-producer"})
    t0 = time.monotonic()
    for i in range(messages):
        # Paced over duration_s so brokers see a steady stream of requests, not one burst.
        if i % 100 == 0:
            ahead = t0 + duration_s * i / messages - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        all_acks.produce("orders", key=str(i % 500).encode(), value=b"o" * 200)
        one_ack.produce("clicks", value=b"c" * 100)
        if i % 10 == 0:
            all_acks.produce("customers", key=f"customer-{i % 200}".encode(), value=str(i).encode())
        if i % 1000 == 0:
            all_acks.poll(0)
            one_ack.poll(0)
        if i and i % (messages // 4 or 1) == 0:
            progress.note(f"produced {i:,} of {messages:,} orders and clicks")
    all_acks.flush(60)
    one_ack.flush(60)
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "billing",
                         "auto.offset.reset": "earliest", "client.id": "billing-consumer"})
    consumer.subscribe(["orders"])
    consumed, deadline = 0, time.monotonic() + 120
    while consumed < messages and time.monotonic() < deadline:
        consumed += sum(1 for m in consumer.consume(1000, timeout=1) if m.error() is None)
    consumer.commit(asynchronous=False)
    consumer.close()
    return {"produced": messages, "consumed": consumed}


def run_demo(config: Config, keep: bool = False, messages: int = 20_000) -> int:
    from ingest.agent_metrics import AgentMetrics
    from ingest.file_tailer import PositionStore
    from ingest.request_log_agent import RequestLogAgent, RequestLogSource
    from ingest.sinks import LandingSink
    from jobs.bronze import from_kafka, start_bronze
    from jobs.lake import Lake, register_tables
    from jobs.pipeline import Pipeline
    from jobs.streams import QUARANTINE, stream
    from kmon.local_cluster import LocalCluster
    from kmon.spark_session import build_spark_session

    p = Progress(TOTAL_STEPS)
    lake_root = f"{config.work_dir}/demo/lake"
    lake = Lake(lake_root)
    cluster = LocalCluster(config, name="demo", owner_bound=not keep)
    try:
        p.step(f"starting a real {config.local_cluster.brokers}-broker Kafka cluster (KRaft)")
        import shutil
        shutil.rmtree(f"{config.work_dir}/demo", ignore_errors=True)  # a second run starts clean
        cluster.start()
        p.note(f"bootstrap.servers={cluster.bootstrap_servers}")

        p.step(f"running the workload with the request log agent following every broker: "
               f"{messages:,} orders (acks=all), {messages:,} clicks (acks=1), a compacted "
               f"topic, consumer group 'billing'")
        registry = CollectorRegistry()
        metrics = AgentMetrics(registry, "request-log-agent")
        agent = RequestLogAgent(
            [RequestLogSource("local", n.node_id, n.request_log) for n in cluster.nodes],
            LandingSink(lake.landing_root, "request-log-agent"),
            PositionStore(f"{config.work_dir}/demo/agent-positions.json"), metrics)
        stop_agent = threading.Event()
        agent_thread = threading.Thread(target=agent.run, args=(stop_agent, 1.0), daemon=True)
        agent_thread.start()
        w = _workload(cluster, messages, p)
        p.note(f"consumed {w['consumed']:,} orders")

        p.step("request log agent: draining the last lines into the landing folder")
        stop_agent.set()
        agent_thread.join(60)
        count = lambda outcome: registry.get_sample_value(  # noqa: E731
            "kmon_agent_records_total", {"agent": "request-log-agent",
                                         "stream": "request_stages", "outcome": outcome}) or 0
        published, quarantined = count("published"), count("quarantined")
        p.note(f"{published:,.0f} request records published, {quarantined:,.0f} quarantined at the edge")

        p.step("starting Spark with Delta (local mode)")
        spark = build_spark_session(config.with_overrides(spark={"storage_root": lake_root}))
        once = {"availableNow": True}

        p.step("bronze and silver: landing -> bronze.request_stages -> silver.request_stages "
               "(+ quarantine); Kafka source: topic orders -> bronze.orders")
        pipeline = Pipeline(spark, lake, config.pipeline,
                            streams=(stream("request_stages"), stream(QUARANTINE)))
        pipeline.process_available()
        start_bronze(from_kafka(spark, {"kafka.bootstrap.servers": cluster.bootstrap_servers},
                                "orders"), lake, "orders", once).awaitTermination()

        p.step("gold: stage percentiles per broker, API and minute (and per 10 s)")
        tables = register_tables(spark, lake)

        p.step("summary")
        summary = spark.sql("""
            SELECT broker, api, count(*) AS requests,
                   round(percentile_approx(total_ms, 0.99), 1) AS total_p99_ms,
                   round(percentile_approx(request_queue_ms, 0.99), 1) AS queue_p99,
                   round(percentile_approx(local_ms, 0.99), 1) AS local_p99,
                   round(percentile_approx(remote_ms, 0.99), 1) AS remote_p99,
                   round(percentile_approx(send_ms, 0.99), 1) AS send_p99
            FROM silver.request_stages
            WHERE api IN ('Produce', 'Fetch') AND NOT is_controller_traffic
            GROUP BY broker, api ORDER BY api, broker""").collect()
        print(f"\n{'broker':>6} {'api':8} {'requests':>9} {'total p99':>10} {'queue':>7} "
              f"{'local':>7} {'remote':>7} {'send':>7}   (ms)")
        for r in summary:
            print(f"{r.broker:>6} {r.api:8} {r.requests:>9,} {r.total_p99_ms:>10} {r.queue_p99:>7} "
                  f"{r.local_p99:>7} {r.remote_p99:>7} {r.send_p99:>7}")
        counts = {t: spark.table(t).count() for t in tables}
        quarantined = counts.get(f"silver.{QUARANTINE}", 0)
        print("\nDelta tables (under " + lake_root + "):")
        for t, c in counts.items():
            print(f"  {t:30s} {c:>9,} rows")
        print(f"\nquarantined rows: {quarantined:,}; orders in Delta via the Kafka source: "
              f"{counts.get('bronze.orders', 0):,} of {w['produced']:,}")
        print("Fetch from consumers waits up to fetch.max.wait.ms (500 ms) in Remote time on a "
              "quiet topic: that is purgatory, not slowness.")
        spark.stop()
        if keep:
            print(f"\ncluster left running: bootstrap.servers={cluster.bootstrap_servers}; "
                  "stop it with `kmon cluster down --name demo`")
        return 0
    finally:
        if not keep:
            cluster.stop()
