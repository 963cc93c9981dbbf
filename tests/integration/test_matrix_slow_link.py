"""A producer behind the slow-link proxy (matrix.mechanisms.slow_link) reaches every broker
through it and only it; with the delay on, its own librdkafka statistics show the delay in
its rtt to every broker while a direct producer's stay fast, and the brokers' request
logs do not show it: its Produce requests are served as fast as anyone's. The
statistics go through the workload's stats hook, as the matrix runs it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from demo.faults.base import FaultContext, FaultRun, now_ms
from matrix.mechanisms.slow_link import SlowProducerLink

DELAY_MS = 200


@pytest.fixture(scope="module")
def linked(kmon_config, tmp_path_factory):
    from demo.workload import Workload
    from infra.local_cluster import LocalCluster
    from ingest.client_stats_hook import kmon_stats_hook
    from ingest.sinks import LandingSink

    work = tmp_path_factory.mktemp("sl")
    config = kmon_config.with_overrides(kmon={"work_dir": str(work)})
    cluster = LocalCluster(config, name=f"pytest-sl-{os.getpid()}", brokers=3, owner_bound=True)
    fault = SlowProducerLink(delay_ms=DELAY_MS, duration_s=20)
    fault.install(cluster)
    sink = LandingSink(work / "landing", "stats")
    hook = kmon_stats_hook("c1", sink, flush_interval_s=1.0)
    workload = Workload(cluster.bootstrap_servers, work / "clients", stats_cb=hook,
                        statistics_interval_ms=2000)
    try:
        cluster.start()
        workload.bootstrap = cluster.bootstrap_servers
        yield cluster, fault, workload, work / "landing" / "client_stats"
    finally:
        workload.stop()
        hook.close()
        cluster.destroy()
        fault.uninstall()


def _broker_rows(folder: Path, client: str, since_ms: int, until_ms: int) -> list[dict]:
    rows = [json.loads(x) for f in sorted(folder.glob("*.jsonl"))
            for x in f.read_text().splitlines() if x]
    return [r for r in rows if r["client_id"] == client and r["scope"] == "broker"
            and since_ms <= r["ts_ms"] <= until_ms and r["rtt_p99_ms"]]


def _produce_requests(node, client: str, since_ms: int) -> list[tuple[str, float]]:
    """(listener, totalTimeMs) of `client`'s Produce requests the broker logged since
    `since_ms` (the line's stamp, UTC)."""
    from ingest.log_time import stamp_to_ms

    out = []
    for line in open(node.request_log, errors="replace"):
        if "Completed request:" not in line or f'"clientId":"{client}"' not in line:
            continue
        if stamp_to_ms(line[1:24]) < since_ms:
            continue
        rec = json.loads(line.split("Completed request:", 1)[1].rsplit(" (kafka.request", 1)[0])
        if rec["requestHeader"]["requestApiKeyName"] == "PRODUCE":
            out.append((rec["listener"], float(rec["totalTimeMs"])))
    return out


def test_the_producers_own_round_trips_show_the_link_and_the_brokers_do_not(linked):
    from demo.workload import ProducerSpec

    cluster, fault, workload, stats = linked
    ctx = FaultContext(cluster=cluster, workload=workload, say=print)
    fault.prepare(ctx)
    workload.start_producer(ProducerSpec("direct", fault.topic, 20, acks="all"))
    time.sleep(8)
    healthy_from = now_ms()
    time.sleep(6)
    proxies = {f"127.0.0.1:{p}" for p in cluster.routes.client_link.values()}
    healthy = _broker_rows(stats, fault.client_id, healthy_from, now_ms())
    assert {r["node_id"] for r in healthy} == {1, 2, 3}
    # Every broker reached through its proxy: the metadata named the CLIENTLINK addresses.
    assert {r["broker_name"].split("/")[0] for r in healthy} == proxies
    assert max(r["rtt_p99_ms"] for r in healthy) < DELAY_MS

    run = FaultRun(fault.name, started_ms=now_ms())
    fault.inject(ctx, run, until=lambda: now_ms() - run.fault_ms > 12_000)
    time.sleep(3)   # the hook's last flush
    settled = run.fault_ms + 4_000
    slow = _broker_rows(stats, fault.client_id, settled, run.fault_ms + 12_000)
    direct = _broker_rows(stats, "direct", settled, run.fault_ms + 12_000)
    assert {r["node_id"] for r in slow} == {1, 2, 3}, slow
    assert min(r["rtt_p99_ms"] for r in slow) >= 2 * DELAY_MS * 0.9, slow
    assert direct and max(r["rtt_p99_ms"] for r in direct) < DELAY_MS, direct
    # The brokers served its requests fast, on the CLIENTLINK listener: the wire is not
    # in their request logs. The direct producer came in on PLAINTEXT.
    served = [r for n in cluster.broker_nodes
              for r in _produce_requests(n, fault.client_id, settled)]
    assert served and {listener for listener, _ in served} == {"CLIENTLINK"}, served
    totals = sorted(t for _, t in served)
    assert totals[len(totals) // 2] < DELAY_MS, totals
    assert {listener for n in cluster.broker_nodes
            for listener, _ in _produce_requests(n, "direct", settled)} == {"PLAINTEXT"}
    assert fault.client_id not in workload.producers     # heal stopped it
    assert fault.proxy.delay_ms == 0
