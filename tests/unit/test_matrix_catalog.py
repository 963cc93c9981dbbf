"""The scenario catalog as a whole: names, classes and ground-truth shapes that every
scenario keeps, and the topology settings a session is started with."""

from __future__ import annotations

import pytest

from core.findings import AnomalyType
from matrix.scenarios import THREE, THREE_APART, Topology, catalog

pytestmark = pytest.mark.unit

TYPES = {t.value for t in AnomalyType}


def test_names_are_unique_and_each_fault_has_its_scenarios_class():
    scenarios = catalog()
    assert len({s.name for s in scenarios}) == len(scenarios)
    for s in scenarios:
        fault = s.make()
        assert fault.fault_class == s.fault_class, s.name
        assert s.summary and len(s.summary) < 200, s.name


def test_ground_truth_names_known_finding_types_and_healthy_ones_expect_nothing():
    for s in catalog():
        fault = s.make()
        for e in fault.expect() + fault.explained() + fault.interim():
            assert e.type in TYPES, (s.name, e.type)
        if s.fault_class in ("healthy", "rewind_healthy"):
            assert fault.expect() == (), s.name
        else:
            assert fault.expect(), s.name


def test_scenarios_of_a_topology_run_together_in_catalog_order():
    """run_matrix groups by topology in first-seen order: a topology's scenarios must be
    one block, or the grouping would reorder them."""
    names = [s.topology.name for s in catalog()]
    blocks = [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]
    assert len(blocks) == len(set(blocks))


def test_broker_config_is_described_and_merged_over_the_demos():
    from kmon.config import load_config
    from matrix.live import topology_config

    assert "offsets.retention.minutes=1" in THREE_APART.describe()
    assert THREE.describe() == "3 brokers, 1 combined controller(s)"
    config = load_config()
    plain, apart = topology_config(config, THREE), topology_config(config, THREE_APART)
    extra = apart.local_cluster.extra_broker_config
    assert extra["offsets.retention.minutes"] == "1"
    # the demo's own broker settings stay
    assert {k: v for k, v in extra.items() if k in plain.local_cluster.extra_broker_config} == \
        plain.local_cluster.extra_broker_config
    assert "offsets.retention.minutes" not in plain.local_cluster.extra_broker_config
    assert apart.local_cluster.brokers == 3 and apart.local_cluster.controllers == 1


def test_a_topology_without_broker_config_leaves_the_cluster_settings_alone():
    t = Topology("x", 3, 1)
    assert t.overrides() == {"local_cluster": {"brokers": 3, "controllers": 1}}
