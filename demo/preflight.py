"""Before the demo starts: its one error type, the checks it makes, a clean slate."""

from __future__ import annotations

import shutil

from demo.settings import DEMO_CLUSTER
from kmon.config import Config
from kmon.monitor import RunError


class DemoError(RunError):
    """The demo cannot start; the message is one line saying what to do."""


def check_port(port: int) -> None:
    import socket

    if not port:
        return
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise DemoError(f"port {port} (the exporter) is in use: stop what holds it, or run "
                            f"`kmon demo --exporter-port <free port>`") from None


def preflight(config: Config, port: int) -> None:
    from infra.preflight import PreflightError, check_disk, check_java, check_python

    try:
        check_python()
        check_java(config.jvm.java_home)
        check_disk(config.work_dir)
    except PreflightError as e:
        raise DemoError(str(e)) from None
    check_port(port)


def clean_previous(config: Config, say) -> None:
    """A second run starts clean: stop a demo cluster left running, remove its data."""
    from infra.local_cluster import LocalCluster

    old = LocalCluster(config, name=DEMO_CLUSTER)
    if old.nodes and any(r["state"] != "stopped" for r in old.status()):
        say("stopping the cluster a previous demo left running")
        old.stop()
    shutil.rmtree(config.work_dir / "demo", ignore_errors=True)
