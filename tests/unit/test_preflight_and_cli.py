"""Start-up checks say what to do in one line; every command has help with an example."""

from __future__ import annotations

import logging
import sys

import pytest

from infra import preflight
from cli.main import build_parser, main
from kmon.log_files import RetriedPy4jCallFilter


@pytest.mark.parametrize("out,major", [
    ('openjdk version "17.0.15" 2025-04-15', 17),
    ('openjdk version "21" 2023-09-19', 21),
    ('java version "1.8.0_392"', 8),
    ("garbage", None),
])
def test_java_major(out, major):
    assert preflight.java_major(out) == major


def test_old_python_is_one_line_with_a_fix():
    with pytest.raises(preflight.PreflightError) as e:
        preflight.check_python((3, 9))
    assert "3.11" in str(e.value) and "\n" not in str(e.value)


def test_missing_java_home_says_what_to_install(tmp_path):
    with pytest.raises(preflight.PreflightError, match="openjdk-17"):
        preflight.check_java(str(tmp_path))


def test_not_enough_disk_says_where(tmp_path):
    with pytest.raises(preflight.PreflightError, match="GB free under"):
        preflight.check_disk(tmp_path, min_free_gb=1e9)


@pytest.mark.parametrize("command", ["setup", "config", "cluster", "demo"])
def test_every_command_has_help_with_example(command, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "example:" in out and f"kmon {command}" in out


def test_bad_config_stops_with_key_and_file(tmp_path, capsys):
    f = tmp_path / "bad.toml"
    f.write_text("[local_cluster]\nbase_port = -1\n")
    assert main(["--config", str(f), "config"]) == 2
    err = capsys.readouterr().err
    assert "local_cluster.base_port" in err and str(f) in err


def test_per_node_action_needs_a_node(capsys):
    assert main(["cluster", "pause"]) == 2
    assert "which node" in capsys.readouterr().err


def _record(name, level, msg, exc=None):
    return logging.LogRecord(name, level, "java_gateway.py", 1056, msg, None, exc)


def test_a_retried_py4j_call_is_not_logged_unless_debugging():
    """py4j logs a retried call (it then succeeds) at INFO with a traceback on the root
    logger: five to seven per demo run before this filter."""
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError:
        exc = sys.exc_info()
    f = RetriedPy4jCallFilter()
    root = logging.getLogger()
    before = root.level
    try:
        root.setLevel(logging.INFO)
        assert not f.filter(_record("root", logging.INFO, "Exception while sending command.", exc))
        # the same words on failure (ERROR) and any other line still pass
        assert f.filter(_record("root", logging.ERROR, "Exception while sending command.", exc))
        assert f.filter(_record("evaluation.detect", logging.INFO, "Exception while sending command."))
        assert f.filter(_record("root", logging.INFO, "something else"))
        root.setLevel(logging.DEBUG)
        assert f.filter(_record("root", logging.INFO, "Exception while sending command.", exc))
    finally:
        root.setLevel(before)


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
@pytest.mark.parametrize("command, option", [("demo", "--warmup"), ("run", "--duration"),
                                             ("agents", "--duration")])
def test_seconds_that_are_not_a_positive_number_are_refused_naming_the_option(
        command, option, value, capsys):
    # `kmon run --duration 0` used to run forever and `--duration -5` to stop at once.
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([command, option, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert option in err and "positive number of seconds" in err and value in err


def test_the_demo_warmup_and_a_run_duration_are_read_in_seconds():
    assert build_parser().parse_args(["demo", "--short", "--warmup", "360"]).warmup == 360.0
    assert build_parser().parse_args(["run", "--duration", "600"]).duration == 600.0
