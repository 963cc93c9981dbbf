"""Where the remediation queue is: the decision step (in `kmon run`) publishes and the
executor (`kmon remediate`) consumes on the same Kafka, whatever is configured."""

from __future__ import annotations

import pytest

from kmon.config import Config
from remediation.queue import queue_client_config

pytestmark = pytest.mark.unit


def test_with_a_monitoring_kafka_the_queue_is_there():
    config = Config().with_overrides(
        telemetry={"bootstrap_servers": "mon1:9092", "client_config": {"security.protocol": "SSL"}},
        watch={"bootstrap_servers": "prod1:9092"})
    conf = queue_client_config(config, "127.0.0.1:9999")
    assert conf["bootstrap.servers"] == "mon1:9092"
    assert conf["security.protocol"] == "SSL"


def test_without_one_the_queue_is_on_the_watched_cluster():
    config = Config().with_overrides(watch={"bootstrap_servers": "prod1:9092",
                                            "client_config": {"client.id": "kmon"}})
    assert queue_client_config(config)["bootstrap.servers"] == "prod1:9092"
    assert queue_client_config(config)["client.id"] == "kmon"
    # The embedded mode: the local cluster's address.
    assert queue_client_config(Config(), "127.0.0.1:9999")["bootstrap.servers"] == \
        "127.0.0.1:9999"


def test_the_decision_step_publishes_where_the_executor_consumes(monkeypatch):
    """They once used [watch] and [telemetry]: with a monitoring Kafka the executor waited
    on a topic nothing was published to."""
    import remediation.queue
    import remediation.reassignments
    from kmon import monitor
    from remediation import executor
    from remediation.stores import JsonLinesResultStore

    config = Config().with_overrides(telemetry={"bootstrap_servers": "mon1:9092"},
                                     watch={"bootstrap_servers": "prod1:9092"})
    published_on = []

    def no_queue(conf, topic):
        published_on.append(conf["bootstrap.servers"])
        raise RuntimeError("no broker in a unit test")

    monkeypatch.setattr(remediation.queue, "ensure_queue_topic", no_queue)
    assert monitor._decision_step(config, None, None, None) is None
    monkeypatch.setattr(remediation.reassignments.JavaReassignments, "for_watched_cluster",
                        classmethod(lambda cls, *a: None))
    monkeypatch.setattr(executor, "LiveCluster", lambda *a, **kw: None)
    ex = executor.build_executor(config, results=JsonLinesResultStore("/dev/null"))
    assert published_on == [ex.consumer_config["bootstrap.servers"]] == ["mon1:9092"]
