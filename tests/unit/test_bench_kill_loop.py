"""The kill -9 loop's configuration file (bench/bench_kill_loop.py): the repository's
conf/kmon.toml with the loop's sections merged over it, loaded by kmon as its processes
load it (the list setting cannot come from the environment)."""

from __future__ import annotations

from bench.bench_kill_loop import restore_action, toml_value, write_config
from kmon.config import load_config


def test_the_written_config_loads_with_every_setting(tmp_path):
    path = tmp_path / "kmon.toml"
    write_config(path, {
        "watch": {"cluster": "killloop", "bootstrap_servers": "127.0.0.1:1"},
        "telemetry": {"bootstrap_servers": "127.0.0.1:2", "topic_prefix": "kmonkl."},
        "pipeline": {"source": "kafka", "exporter_port": 9999},
        "spark": {"storage_root": str(tmp_path / "lake")},
        "remediation": {"enabled_actions": ["restore_group_offsets"], "dry_run": False,
                        "max_actions_per_hour": 10_000},
    })
    c = load_config(path, environ={})
    assert c.watch.bootstrap_servers == "127.0.0.1:1"
    assert c.telemetry.topic_prefix == "kmonkl."
    assert c.pipeline.source == "kafka" and c.pipeline.exporter_port == 9999
    assert c.remediation.enabled_actions == ["restore_group_offsets"]
    assert c.remediation.dry_run is False and c.remediation.max_actions_per_hour == 10_000
    assert c.spark.master == "local[2]"          # kept from conf/kmon.toml
    assert c.storage_root == str(tmp_path / "lake")


def test_toml_values():
    assert toml_value(True) == "true" and toml_value(2.5) == "2.5"
    assert toml_value('a "b"') == '"a \\"b\\""'
    assert toml_value(["x", 1]) == '["x", 1]'


def test_a_restore_action_passes_the_queue_format():
    from remediation.actions import Action

    a = restore_action("kl-restore-0", 0)
    assert Action.from_json(a.to_json()) == a
    assert a.operation["partitions"][0]["offset"] == 50 and not a.dry_run
