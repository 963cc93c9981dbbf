"""The delaying proxy forwards bytes both ways, adds its delay each way, switches at runtime
(real sockets on loopback, no Kafka)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from matrix.mechanisms.delay_proxy import DelayProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address
    server.shutdown()
    server.server_close()


def _round_trip(port: int, payload: bytes = b"ping") -> tuple[bytes, float]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        started = time.monotonic()
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            got += s.recv(65536)
        return got, time.monotonic() - started


def test_pass_through_then_delay_each_way_then_off(echo):
    with DelayProxy() as proxy:
        port = proxy.add_route(echo)
        got, rtt0 = _round_trip(port)
        assert got == b"ping"
        proxy.set_delay(150)
        got, rtt = _round_trip(port)
        assert got == b"ping" and rtt >= 0.300, f"round trip {rtt:.3f}s, 2 x 150 ms expected"
        proxy.set_delay(0)
        got, rtt_off = _round_trip(port)
        assert got == b"ping" and rtt_off < rtt
        assert proxy.stats["connections"] == 3 and proxy.stats["bytes_up"] == 12


def test_port_is_bound_before_start_and_target_resolved_per_connection(echo):
    proxy = DelayProxy(delay_ms=50)
    target = {}
    port = proxy.add_route(lambda: target["addr"])   # not known yet, as a broker's port
    target["addr"] = echo
    with proxy:
        big = bytes(range(256)) * 4096            # 1 MiB, many chunks, order kept
        got, rtt = _round_trip(port, big)
        assert got == big and rtt >= 0.100


def test_bandwidth_cap_and_unreachable_target(echo):
    with DelayProxy(bandwidth_bytes_s=1_000_000) as proxy:
        port = proxy.add_route(echo)
        got, rtt = _round_trip(port, b"x" * 300_000)
        assert len(got) == 300_000 and rtt >= 0.3, f"300 KB at 1 MB/s took {rtt:.3f}s"
        dead = proxy.add_route(("127.0.0.1", 1))     # added while running; nothing listens
        with socket.create_connection(("127.0.0.1", dead), timeout=10) as s:
            assert s.recv(10) == b""                    # closed, not hung
        assert proxy.stats["failed_connects"] == 1
    proxy.stop()                                        # twice is fine


def test_delayed_broker_routes_the_cluster_and_states_its_truth(tmp_path):
    from infra.local_cluster import LocalCluster
    from kmon.config import Config
    from matrix.mechanisms.delayed_broker import DelayedBroker

    config = Config().with_overrides(kmon={"work_dir": str(tmp_path)},
                                     local_cluster={"base_port": 0})
    cluster = LocalCluster(config, name="routed", brokers=3)
    fault = DelayedBroker(broker=2)
    fault.install(cluster)
    try:
        assert set(cluster.routes.advertised) == {2} and set(cluster.routes.replication) == {1, 3}
        cluster._layout()
        assert all(n.replication_port for n in cluster.nodes)
        two = cluster.node(2).server_properties.read_text()
        assert f"PLAINTEXT://127.0.0.1:{cluster.advertised_ports[2]}" in two
        assert "inter.broker.listener.name=REPLICATION" in two
    finally:
        fault.uninstall()
    [e] = fault.expect()
    assert e.matches({"type": "slow_broker", "entity": "broker:2", "cause": "slow_follower"})
    assert not e.names({"type": "slow_broker", "entity": "broker:1"})
    victims, retried = fault.explained()
    assert retried.matches({"type": "offset_rewind", "entity": "group:g/t-0",
                            "cause": "commit_reordered", "severity": "info"})
    assert victims.matches({"type": "slow_broker", "entity": "broker:3",
                            "cause": "remote_produce_slow_follower"})
    assert not victims.names({"type": "slow_broker", "entity": "broker:2"})
    assert victims.names({"type": "slow_broker", "entity": "broker:21"})


def test_slow_producer_link_routes_every_broker_and_states_its_truth(tmp_path):
    from infra.local_cluster import LocalCluster
    from kmon.config import Config
    from matrix.mechanisms.slow_link import SlowProducerLink

    config = Config().with_overrides(kmon={"work_dir": str(tmp_path)},
                                     local_cluster={"base_port": 0})
    cluster = LocalCluster(config, name="linked", brokers=3)
    fault = SlowProducerLink()
    fault.install(cluster)
    try:
        assert set(cluster.routes.client_link) == {1, 2, 3}
        assert not cluster.routes.advertised and not cluster.routes.replication
        cluster._layout()
        for n in cluster.broker_nodes:
            props = n.server_properties.read_text()
            assert f"CLIENTLINK://127.0.0.1:{cluster.routes.client_link[n.node_id]}" in props
            assert "inter.broker.listener.name=PLAINTEXT" in props
        assert fault.bootstrap(cluster) == ",".join(
            f"127.0.0.1:{cluster.routes.client_link[b]}" for b in (1, 2, 3))
    finally:
        fault.uninstall()
    [e] = fault.expect()
    assert e.matches({"type": "slow_client", "entity": "client:far-producer",
                      "cause": "client_slow_link"})
    assert not e.matches({"type": "slow_client", "entity": "client:far-producer",
                          "cause": "client_slow_read"})
    assert not e.names({"type": "slow_broker", "entity": "broker:1"})
    assert fault.explained() == ()


def test_delayed_follower_fetches_route_only_the_brokers_way_to_its_leaders(tmp_path):
    from types import SimpleNamespace as NS

    from demo.faults.base import FaultRun
    from infra.local_cluster import LocalCluster
    from kmon.config import Config
    from matrix.mechanisms.replication_delay import DelayedFollowerFetches

    config = Config().with_overrides(kmon={"work_dir": str(tmp_path)},
                                     local_cluster={"base_port": 0})
    cluster = LocalCluster(config, name="follower", brokers=3)
    fault = DelayedFollowerFetches(broker=1, delay_ms=300, duration_s=5)
    fault.install(cluster)
    try:
        assert set(cluster.routes.advertised) == {1} and set(cluster.routes.replication) == {2, 3}
        cluster._layout()
        props = {n.node_id: n.server_properties.read_text() for n in cluster.nodes}
        assert "inter.broker.listener.name=REPLICATION" in props[1]
        assert all("inter.broker.listener.name=PLAINTEXT" in props[b] for b in (2, 3))
        # the fault delays the way out only, and is off again after its heal
        run = FaultRun(fault.name, 1_000)
        ctx = NS(say=lambda _m: None, stopping=lambda: False, sleep=lambda _s: None)
        seen = []
        fault.inject(ctx, run, until=lambda: seen.append(
            (fault.proxy.delay_ms, fault.inbound.delay_ms)) or True)
        assert seen == [(300, 0)]
        assert fault.proxy.delay_ms == 0 and run.fault_ms and run.notes["broker"] == 1
    finally:
        fault.uninstall()
    [e] = fault.expect()
    assert e.matches({"type": "slow_broker", "entity": "broker:1", "cause": "slow_follower"})
    assert not e.matches({"type": "slow_broker", "entity": "broker:1",
                          "cause": "request_handlers_saturated"})
    victims, retried = fault.explained()
    assert victims.matches({"type": "slow_broker", "entity": "broker:3",
                            "cause": "remote_produce_slow_follower"})
