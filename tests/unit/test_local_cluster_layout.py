"""The server.properties a LocalCluster writes for its nodes (no JVM started)."""

from __future__ import annotations

import pytest

from kmon.config import Config
from kmon.local_cluster import ClusterError, LocalCluster


def _properties(path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _laid_out(tmp_path, **local_cluster) -> LocalCluster:
    config = Config().with_overrides(kmon={"work_dir": str(tmp_path)},
                                     local_cluster={"base_port": 0, **local_cluster})
    cluster = LocalCluster(config, name="layout")
    cluster._layout()
    return cluster


def test_by_default_every_node_is_broker_and_controller(tmp_path):
    cluster = _laid_out(tmp_path, brokers=3)
    props = [_properties(n.server_properties) for n in cluster.nodes]
    assert [p["process.roles"] for p in props] == ["broker,controller"] * 3
    assert all(p["controller.quorum.voters"].count("@") == 3 for p in props)
    assert all("CONTROLLER://" in p["listeners"] for p in props)


def test_one_controller_is_the_last_node_and_the_others_are_brokers_only(tmp_path):
    cluster = _laid_out(tmp_path, brokers=3, controllers=1)
    one, two, three = (_properties(n.server_properties) for n in cluster.nodes)
    assert cluster.controller_ids() == [3]
    assert (one["process.roles"], two["process.roles"], three["process.roles"]) == (
        "broker", "broker", "broker,controller")
    voter = f"3@127.0.0.1:{cluster.node(3).controller_port}"
    assert one["controller.quorum.voters"] == two["controller.quorum.voters"] == voter
    assert "CONTROLLER://" not in one["listeners"] and "CONTROLLER://" in three["listeners"]
    # Brokers still need to know how to reach the controllers.
    assert one["controller.listener.names"] == "CONTROLLER"
    assert "CONTROLLER:PLAINTEXT" in one["listener.security.protocol.map"]


def test_more_controllers_than_nodes_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ClusterError, match="local_cluster.controllers is 4, but the cluster "
                                           "has 3 nodes"):
        _laid_out(tmp_path, brokers=3, controllers=4)
