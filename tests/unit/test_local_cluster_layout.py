"""The server.properties a LocalCluster writes for its nodes (no JVM started)."""

from __future__ import annotations

import pytest

from infra.local_cluster import ClusterError, LocalCluster
from kmon.config import Config


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


def test_dedicated_controllers_follow_the_brokers_and_have_no_client_listener(tmp_path):
    cluster = _laid_out(tmp_path, brokers=3, dedicated_controllers=1)
    assert [n.node_id for n in cluster.nodes] == [1, 2, 3, 4]
    assert [n.node_id for n in cluster.broker_nodes] == [1, 2, 3]
    assert [n.node_id for n in cluster.controller_nodes] == [4] == cluster.controller_ids()
    props = {n.node_id: _properties(n.server_properties) for n in cluster.nodes}
    assert [props[i]["process.roles"] for i in (1, 2, 3, 4)] == ["broker"] * 3 + ["controller"]
    four = cluster.node(4)
    assert props[4]["listeners"] == f"CONTROLLER://127.0.0.1:{four.controller_port}"
    assert "advertised.listeners" not in props[4] and "inter.broker.listener.name" not in props[4]
    assert all(props[i]["controller.quorum.voters"] == f"4@127.0.0.1:{four.controller_port}"
               for i in (1, 2, 3, 4))
    assert all("CONTROLLER://" not in props[i]["listeners"] for i in (1, 2, 3))
    assert props[1]["offsets.topic.replication.factor"] == "3"
    assert cluster.bootstrap_servers == ",".join(f"127.0.0.1:{cluster.node(i).client_port}"
                                                 for i in (1, 2, 3))
    assert [r["bootstrap"] for r in cluster.status()][3] == "-"


def test_dedicated_controllers_and_state_reload(tmp_path):
    cluster = _laid_out(tmp_path, brokers=2, dedicated_controllers=3)
    again = LocalCluster(cluster.config, name="layout")
    assert again.size == 2 and again.dedicated_controllers == 3
    assert again.controller_ids() == [3, 4, 5]
    assert [n.node_id for n in again.broker_nodes] == [1, 2]


def test_a_new_layout_takes_the_requested_shape_not_the_one_saved_under_the_name(tmp_path):
    # The live matrix ran its 3-broker + dedicated-controller topology on the 5-broker
    # layout of the topology before it: the saved state of the same name won.
    _laid_out(tmp_path, brokers=5, controllers=3)
    config = Config().with_overrides(kmon={"work_dir": str(tmp_path)},
                                     local_cluster={"base_port": 0, "brokers": 3,
                                                    "controllers": 0, "dedicated_controllers": 1})
    cluster = LocalCluster(config, name="layout")
    assert len(cluster.nodes) == 5          # what is there now, until it is laid out again
    cluster._layout()
    assert [n.node_id for n in cluster.broker_nodes] == [1, 2, 3]
    assert cluster.controller_ids() == [4]
    assert [n.node_id for n in LocalCluster(config, name="layout").nodes] == [1, 2, 3, 4]


def test_advertised_port_and_replication_listener_for_a_proxied_broker(tmp_path):
    from infra.cluster_layout import Routes

    config = Config().with_overrides(kmon={"work_dir": str(tmp_path)},
                                     local_cluster={"base_port": 0})
    routes = Routes(advertised={2: 40002}, replication={1: 40101, 3: 40103})
    cluster = LocalCluster(config, name="routes", brokers=3, routes=routes)
    cluster._layout()
    one, two, three = (_properties(n.server_properties) for n in cluster.nodes)
    n1, n2, _ = cluster.nodes
    assert two["advertised.listeners"] == (f"PLAINTEXT://127.0.0.1:40002,"
                                           f"REPLICATION://127.0.0.1:{n2.replication_port}")
    assert f"PLAINTEXT://127.0.0.1:{n2.client_port}" in two["listeners"]
    assert two["inter.broker.listener.name"] == "REPLICATION"
    assert one["inter.broker.listener.name"] == three["inter.broker.listener.name"] == "PLAINTEXT"
    assert one["advertised.listeners"] == (f"PLAINTEXT://127.0.0.1:{n1.client_port},"
                                           f"REPLICATION://127.0.0.1:40101")
    assert f"REPLICATION://127.0.0.1:{n1.replication_port}" in one["listeners"]
    assert cluster.advertised_ports == {2: 40002}


def test_a_client_link_listener_on_every_broker_advertised_at_its_proxy(tmp_path):
    from infra.cluster_layout import Routes

    config = Config().with_overrides(kmon={"work_dir": str(tmp_path)},
                                     local_cluster={"base_port": 0, "brokers": 3,
                                                    "controllers": 0, "dedicated_controllers": 1})
    routes = Routes(client_link={1: 40201, 2: 40202, 3: 40203})
    cluster = LocalCluster(config, name="client-link", routes=routes)
    cluster._layout()
    brokers, [controller] = cluster.broker_nodes, cluster.controller_nodes
    for n in brokers:
        props = _properties(n.server_properties)
        assert n.client_link_port and n.client_link_port not in (
            n.client_port, n.controller_port, n.metrics_port)
        assert props["listeners"] == (f"PLAINTEXT://127.0.0.1:{n.client_port},"
                                      f"CLIENTLINK://127.0.0.1:{n.client_link_port}")
        assert props["advertised.listeners"] == (f"PLAINTEXT://127.0.0.1:{n.client_port},"
                                                 f"CLIENTLINK://127.0.0.1:{40200 + n.node_id}")
        assert props["inter.broker.listener.name"] == "PLAINTEXT"
        assert "CLIENTLINK:PLAINTEXT" in props["listener.security.protocol.map"]
    assert controller.client_link_port == 0
    assert "CLIENTLINK" not in _properties(controller.server_properties)["listeners"]
    # The clients' bootstrap stays the direct one; the saved state keeps the ports.
    assert cluster.bootstrap_servers == ",".join(n.bootstrap for n in brokers)
    again = LocalCluster(config, name="client-link")
    assert [n.client_link_port for n in again.nodes] == [n.client_link_port for n in cluster.nodes]


def test_jvm_options_come_after_kmons_own_on_every_broker_command(tmp_path, monkeypatch):
    import infra.local_cluster as local_cluster

    cluster = _laid_out(tmp_path, brokers=1, jvm_options=["-XX:TieredStopAtLevel=1", "-Xss2m"])
    launched = []

    class Started:
        pid = 4242

        def __init__(self, cmd, **_kw):
            launched.append(cmd)

    monkeypatch.setattr(cluster.deps, "ensure", lambda name: [tmp_path / "agent.jar"])
    monkeypatch.setattr(local_cluster.subprocess, "Popen", Started)
    cluster._launch(cluster.nodes[0], "classpath")
    cmd = launched[0]
    at = cmd.index("-XX:MaxGCPauseMillis=20")
    assert cmd[at + 1:at + 3] == ["-XX:TieredStopAtLevel=1", "-Xss2m"]
    assert cmd.index("-Xss2m") < cmd.index("kafka.Kafka")


def test_node_env_reaches_only_its_node_and_adds_to_the_inherited_environment(tmp_path,
                                                                              monkeypatch):
    import infra.local_cluster as local_cluster

    config = Config().with_overrides(kmon={"work_dir": str(tmp_path)},
                                     local_cluster={"base_port": 0, "brokers": 2})
    cluster = LocalCluster(config, name="layout", node_env={2: {"FAKETIME": "-300s"}})
    cluster._layout()
    envs = {}

    class Started:
        def __init__(self, cmd, env=None, **_kw):
            self.pid = 4240 + len(envs)
            envs[cmd[-1]] = env

    monkeypatch.setattr(cluster.deps, "ensure", lambda name: [tmp_path / "agent.jar"])
    monkeypatch.setattr(local_cluster.subprocess, "Popen", Started)
    monkeypatch.setenv("KMON_LAYOUT_PROBE", "kept")
    for n in cluster.nodes:
        cluster._launch(n, "classpath")
    first, second = (envs[str(n.server_properties)] for n in cluster.nodes)
    assert first is None                      # inherits ours unchanged
    assert second["FAKETIME"] == "-300s" and second["KMON_LAYOUT_PROBE"] == "kept"


def test_a_jvm_option_that_is_not_one_names_the_key(tmp_path):
    from core.config_keys import ConfigError

    with pytest.raises(ConfigError, match=r"local_cluster\.jvm_options.*'Xmx1g'"):
        Config().with_overrides(local_cluster={"jvm_options": ["-Xss2m", "Xmx1g"]})


def test_node_config_reaches_only_its_node_over_every_brokers_and_again_at_restart(tmp_path):
    cluster = _laid_out(tmp_path, brokers=3, extra_broker_config={"log.cleaner.enable": "true",
                                                                  "num.io.threads": "4"})
    cluster.node_config[2] = {"log.cleaner.enable": "false"}
    for n in cluster.nodes:       # what start() and restart() write
        cluster._write_node_files(n)
    props = {n.node_id: _properties(n.server_properties) for n in cluster.nodes}
    assert props[2]["log.cleaner.enable"] == "false" and props[2]["num.io.threads"] == "4"
    assert props[1]["log.cleaner.enable"] == props[3]["log.cleaner.enable"] == "true"
    cluster.node_config.pop(2)
    cluster._write_node_files(cluster.node(2))
    assert _properties(cluster.node(2).server_properties)["log.cleaner.enable"] == "true"
    built = LocalCluster(cluster.config, name="layout", node_config={"3": {"a.b": 1}})
    assert built.node_config == {3: {"a.b": "1"}}


def test_a_route_is_claimed_once_per_cluster():
    from infra.cluster_layout import Routes

    routes = Routes()
    assert routes.claim("replication", 2, 40001) == 40001
    routes.claim("replication", 3, 40002)
    routes.claim("advertised", 2, 40003)        # another kind of path: its own table
    with pytest.raises(ValueError, match="node 2's replication route is already taken"):
        routes.claim("replication", 2, 40004)
    assert routes.replication == {2: 40001, 3: 40002}
