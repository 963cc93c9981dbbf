"""The integration tier's shared Kafka cluster."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="package")
def kafka_cluster(kmon_config):
    """A real 3-broker KRaft cluster, stopped and deleted at the end even when tests fail.

    Package-scoped: it goes when the last integration test has run. As a session fixture
    its three idle brokers took about a quarter of a core through the Spark and unit
    tiers that run after this one (2 cores, beside the corpus replays)."""
    from infra.local_cluster import LocalCluster

    cluster = LocalCluster(kmon_config, name=f"pytest-{os.getpid()}", brokers=3, owner_bound=True)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
