"""Peak resident memory of a local 3-broker cluster under a produce/consume workload.

Run: .kmon/venv/bin/python bench/cluster_memory.py [--messages N]
Prints the peak RSS of each broker JVM and of the whole cluster (sampled every 0.5 s).
"""

from __future__ import annotations

import argparse
import threading
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from infra.local_cluster import LocalCluster
from kmon.config import load_config


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    args = ap.parse_args()
    cluster = LocalCluster(load_config(), name="bench-memory", owner_bound=True)
    peak: dict[int, float] = {}
    total_peak = 0.0
    stop = threading.Event()

    def sample():
        nonlocal total_peak
        while not stop.is_set():
            now = {n.node_id: rss_mb(n.pid) for n in cluster.nodes if n.pid}
            for k, v in now.items():
                peak[k] = max(peak.get(k, 0), v)
            total_peak = max(total_peak, sum(now.values()))
            time.sleep(0.5)

    try:
        t0 = time.monotonic()
        cluster.start()
        print(f"cluster ready in {time.monotonic() - t0:.1f} s")
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic("mem", 6, 3)])["mem"].result(60)
        time.sleep(1)
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5})
        for i in range(args.messages):
            while True:
                try:
                    p.produce("mem", value=b"m" * 500)
                    break
                except BufferError:
                    p.poll(0.05)
        p.flush(120)
        c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "mem",
                      "auto.offset.reset": "earliest"})
        c.subscribe(["mem"])
        got = 0
        while got < args.messages:
            got += len(c.consume(10_000, timeout=2))
        c.close()
        time.sleep(2)
        stop.set()
        sampler.join()
    finally:
        cluster.destroy()
    for k in sorted(peak):
        print(f"broker {k}: peak RSS {peak[k]:.0f} MiB")
    print(f"cluster (3 brokers, heap {load_config().local_cluster.heap} each): "
          f"peak total RSS {total_peak:.0f} MiB after {args.messages:,} x 500 B messages "
          f"produced (acks=all) and consumed")


if __name__ == "__main__":
    main()
