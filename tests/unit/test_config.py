"""Configuration is typed and validated at start; errors name the key and the file."""

from __future__ import annotations

import pytest

from kmon.config import ConfigError, describe_keys, load_config, DEFAULT_CONFIG_FILE


def write(tmp_path, text):
    f = tmp_path / "kmon.toml"
    f.write_text(text)
    return f


def test_repository_default_file_loads():
    c = load_config(DEFAULT_CONFIG_FILE, environ={})
    assert c.local_cluster.brokers == 3
    assert c.spark.master.startswith("local")


@pytest.mark.parametrize("text,expected", [
    ("[spark]\nmastr = 'local'\n", "unknown key 'spark.mastr'"),
    ("[local_cluster]\nbase_port = -1\n", "key 'local_cluster.base_port' must be >= 0, got -1"),
    ("[local_cluster]\nbase_port = 70000\n", "key 'local_cluster.base_port' must be <= 65535"),
    ("[local_cluster]\nbrokers = 'three'\n", "key 'local_cluster.brokers': expected an integer"),
    ("[spark]\nui_enabled = 3\n", "key 'spark.ui_enabled': expected true or false"),
    ("[kmon]\nlog_level = 'LOUD'\n", "key 'kmon.log_level' must be one of DEBUG, INFO"),
    ("[sparkk]\nmaster = 'x'\n", "unknown section [sparkk]"),
    ("[spark\n", "not valid TOML"),
    ("[slow_broker]\nthreshold_msx = 300\n", "unknown key 'slow_broker.threshold_msx'"),
    ("[local_cluster]\ndedicated_controllers = 6\n",
     "key 'local_cluster.dedicated_controllers' must be <= 5"),
], ids=["typo_in_key", "negative_port", "port_too_high", "string_for_int", "int_for_bool",
        "unknown_choice", "typo_in_section", "broken_toml",
        "typo_in_detector_key", "too_many_dedicated_controllers"])
def test_bad_config_names_key_and_file(tmp_path, text, expected):
    f = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(f, environ={})
    assert expected in str(e.value)
    assert str(f) in str(e.value)


def test_environment_overrides_file_and_is_validated(tmp_path):
    f = write(tmp_path, "[spark]\nmaster = 'local[1]'\n")
    c = load_config(f, environ={"KMON__SPARK__MASTER": "spark://h:7077",
                                "KMON__LOCAL_CLUSTER__BROKERS": "5"})
    assert c.spark.master == "spark://h:7077"
    assert c.local_cluster.brokers == 5
    with pytest.raises(ConfigError, match="local_cluster.base_port' must be >= 0"):
        load_config(f, environ={"KMON__LOCAL_CLUSTER__BASE_PORT": "-5"})
    with pytest.raises(ConfigError, match="unknown section"):
        load_config(f, environ={"KMON__NOPE__X": "1"})


def test_dedicated_controllers_exclude_combined_controllers(tmp_path):
    c = load_config(write(tmp_path, "[local_cluster]\ndedicated_controllers = 3\n"), environ={})
    assert c.local_cluster.dedicated_controllers == 3 and c.local_cluster.controllers == 0
    assert load_config(DEFAULT_CONFIG_FILE, environ={}).local_cluster.dedicated_controllers == 0
    f = write(tmp_path, "[local_cluster]\ndedicated_controllers = 1\ncontrollers = 1\n")
    with pytest.raises(ConfigError, match=r"local_cluster.dedicated_controllers \(1\) and "
                                          r"local_cluster.controllers \(1\)"):
        load_config(f, environ={})
    with pytest.raises(ConfigError, match="must be >= 0"):
        load_config(f, environ={"KMON__LOCAL_CLUSTER__DEDICATED_CONTROLLERS": "-1"})


def test_the_removed_request_log_mode_is_an_unknown_key(tmp_path):
    """`mode = "full"` is gone (windows are the only wire format): a file or an environment
    that still sets it fails at start, and the message lists `full_brokers`, what took its
    place for root-cause work."""
    f = write(tmp_path, "[request_log]\nmode = 'full'\n")
    with pytest.raises(ConfigError) as e:
        load_config(f, environ={})
    assert "unknown key 'request_log.mode'" in str(e.value)
    assert "full_brokers" in str(e.value)
    with pytest.raises(ConfigError, match="unknown key 'request_log.mode'"):
        load_config(write(tmp_path, ""), environ={"KMON__REQUEST_LOG__MODE": "windows"})
    with pytest.raises(ConfigError, match="unknown key 'request_log.mode'"):
        load_config(DEFAULT_CONFIG_FILE, environ={}).with_overrides(request_log={"mode": "full"})


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.toml: configuration file not found"):
        load_config(tmp_path / "nope.toml", environ={})


def test_storage_root_defaults_under_work_dir(tmp_path):
    c = load_config(write(tmp_path, "[kmon]\nwork_dir = '/srv/kmon'\n"), environ={})
    assert c.storage_root == "/srv/kmon/lake"
    c = c.with_overrides(spark={"storage_root": "s3a://bucket/kmon"})
    assert c.storage_root == "s3a://bucket/kmon"


def test_every_key_is_documented():
    text = describe_keys()
    for key in ("master =", "storage_root =", "base_port =", "maven_repo =", "work_dir ="):
        assert key in text
    assert text.count("# ") >= 15


def test_the_configuration_reference_file_is_current():
    from kmon.config_reference import PATH, render
    assert PATH.read_text() == render(), "run: python -m kmon.config_reference --write"


def test_a_list_key_from_the_environment_is_a_toml_array(tmp_path):
    cfg = load_config(write(tmp_path, ""), environ={"KMON__REQUEST_LOG__FULL_BROKERS": "[1, 3]"})
    assert cfg.request_log.full_brokers == [1, 3]
    with pytest.raises(ConfigError, match="request_log.full_brokers.*expected a list"):
        load_config(write(tmp_path, ""), environ={"KMON__REQUEST_LOG__FULL_BROKERS": "1, 3"})
