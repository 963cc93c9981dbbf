"""A cluster with a dedicated KRaft controller is a working cluster whose controller no
client ever reaches: 3 brokers + 1 controller-only node (node 4)."""

from __future__ import annotations

import os
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from tests.integration.test_local_cluster import create_topic, request_log_entries


@pytest.fixture(scope="module")
def dedicated_cluster(kmon_config, tmp_path_factory):
    from infra.local_cluster import LocalCluster

    config = kmon_config.with_overrides(kmon={"work_dir": str(tmp_path_factory.mktemp("dc"))},
                                        local_cluster={"dedicated_controllers": 1})
    cluster = LocalCluster(config, name=f"pytest-dc-{os.getpid()}", brokers=3, owner_bound=True)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


def test_three_brokers_and_a_dedicated_controller_serve_rf3(dedicated_cluster):
    cl = dedicated_cluster
    assert [n.node_id for n in cl.broker_nodes] == [1, 2, 3]
    assert cl.controller_ids() == [4] and not cl.node(4).is_broker
    assert str(cl.node(4).client_port) not in cl.bootstrap_servers

    topic = f"dc-{uuid.uuid4().hex[:6]}"
    md = create_topic(cl, topic, partitions=3, rf=3, **{"min.insync.replicas": "2"})
    assert set(md.partitions[0].replicas) == {1, 2, 3}
    client_id = f"dc-client-{topic}"
    producer = Producer({"bootstrap.servers": cl.bootstrap_servers, "acks": "all",
                         "client.id": client_id})
    errors = []
    for i in range(500):
        producer.produce(topic, value=str(i).encode(), partition=i % 3,
                         on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(60) == 0 and len(errors) == 500 and not any(errors)
    consumer = Consumer({"bootstrap.servers": cl.bootstrap_servers, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "client.id": client_id})
    consumer.subscribe([topic])
    got = 0
    for _ in range(60):
        got += sum(1 for m in consumer.consume(500, timeout=1) if m.error() is None)
        if got >= 500:
            break
    consumer.close()
    assert got == 500

    controller = request_log_entries(cl.node(4).request_log)
    apis = {e[0] for e in controller}
    print("controller node 4 request log APIs:", sorted(apis))
    assert controller, "the controller logs the brokers' requests (heartbeats, metadata fetches)"
    assert not any(client_id in e[3] for e in controller), "a client reached the controller"
    # Brokers' heartbeats and registrations, metadata log FETCHes, CREATE_TOPICS forwarded
    # by a broker: no client API.
    assert not apis & {"PRODUCE", "METADATA", "JOIN_GROUP", "OFFSET_COMMIT", "FIND_COORDINATOR"}
    assert "BROKER_HEARTBEAT" in apis
    leaders = {p.leader for p in md.partitions.values()}
    for n in cl.broker_nodes:
        if n.node_id in leaders:
            assert any(e[0] == "PRODUCE" and topic in e[3]
                       for e in request_log_entries(n.request_log))
    assert (cl.node(4).log_dir / "controller.log").exists()
