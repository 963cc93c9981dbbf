"""kmon's clients never create a topic on the cluster they watch by asking for its metadata.

The brokers run with Kafka's default auto.create.topics.enable=true. A librdkafka
AdminClient asks for a named topic's metadata with allowAutoTopicCreation on by default, so
a kept client that was once asked about a topic re-creates it, after it is deleted, at its
next metadata refresh (seen in the matrix: five deleted topics came back with one replica
each). The control case shows the cluster does create topics so; kmon's watch clients and
the matrix's kept AdminClient do not.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from demo.faults.base import FaultContext
from infra.kafka_clients import librdkafka_config

pytestmark = pytest.mark.integration


def _exists(bootstrap: str, topic: str) -> bool:
    # The whole-cluster listing never creates anything (no topic named).
    return topic in AdminClient({"bootstrap.servers": bootstrap,
                                 "allow.auto.create.topics": False}).list_topics(
        timeout=10).topics


def _ask_and_wait(admin, bootstrap: str, topic: str, wait_s: float = 5.0) -> bool:
    """Ask `admin` for the topic's metadata; whether the topic exists within wait_s."""
    admin.list_topics(topic=topic, timeout=10)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if _exists(bootstrap, topic):
            return True
        time.sleep(0.5)
    return False


def test_a_default_admin_client_creates_the_topic_it_asks_about(kafka_cluster):
    bootstrap = kafka_cluster.bootstrap_servers
    topic = f"ghost-control-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        assert _ask_and_wait(admin, bootstrap, topic), \
            "the brokers no longer auto-create topics: the tests below prove nothing"
    finally:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(30)


def test_kmons_watch_clients_and_the_matrix_admin_create_nothing(kafka_cluster, kmon_config):
    bootstrap = kafka_cluster.bootstrap_servers
    watch = kmon_config.with_overrides(watch={"bootstrap_servers": bootstrap}).watch
    topic = f"ghost-watch-{uuid.uuid4().hex[:6]}"
    assert not _ask_and_wait(AdminClient(librdkafka_config(watch, "watch")), bootstrap, topic)
    ctx = FaultContext(cluster=kafka_cluster, workload=None)
    try:
        assert not _ask_and_wait(ctx.admin(), bootstrap, topic)
    finally:
        ctx.close()
