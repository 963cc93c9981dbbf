"""`kmon` as a child process, started and stopped the way an operator does it.

Integration tests that need the real command (its Spark JVM, its signal handling, its
exit code) run it through these: `kmon_env` points it at a test's lake and local cluster,
`start_kmon` starts it in its own process group with its output in a log file, `ctrl_c`
stops it as Ctrl-C in a terminal would and `kill9` kills it outright.
`request_logs_from_end` makes its agents start at the end of the request logs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Mapping

REPO = Path(__file__).resolve().parents[2]
KMON = [sys.executable, "-m", "cli"]


def kmon_env(cluster, lake_root: str, watch_cluster: str = "e2e",
             overrides: Mapping[str, str] | None = None) -> dict:
    """The environment of a kmon child on `cluster` (a LocalCluster) writing `lake_root`;
    `overrides` are more KMON__SECTION__KEY settings (the exporter is off unless set)."""
    return {**os.environ, "KMON__SPARK__STORAGE_ROOT": lake_root,
            "KMON__LOCAL_CLUSTER__NAME": cluster.name, "KMON__WATCH__CLUSTER": watch_cluster,
            "KMON__SPARK__SHUFFLE_PARTITIONS": "2", "KMON__PIPELINE__EXPORTER_PORT": "0",
            "KMON__PIPELINE__PROGRESS_INTERVAL_S": "5", "PYTHONPATH": str(REPO),
            **(overrides or {})}


def start_kmon(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    """`kmon <args>` in a new session (its own process group), output appended to `log`."""
    with open(log, "ab") as out:
        return subprocess.Popen(KMON + args, cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def kill9(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def ctrl_c(proc: subprocess.Popen, timeout: float = 180) -> int:
    """What Ctrl-C in a terminal does: SIGINT to the whole process group (PySpark's JVM
    ignores SIGINT, so the Python side stops the queries before the JVM goes)."""
    os.killpg(proc.pid, signal.SIGINT)
    return proc.wait(timeout)


def log_tail(log: Path, chars: int = 3000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except FileNotFoundError:
        return ""


def request_logs_from_end(state_dir: Path, watch_cluster: str, cluster) -> dict[int, int]:
    """Save the request-log agent's positions in `state_dir` (what `--state-dir` names) at
    the end of each node's last complete request-log line, as the agent saves them, so the
    agents start there; returns node id -> that offset.

    The package's cluster has logged every integration test before the one starting kmon:
    read from the start, a few hundred thousand lines cost minutes of agent and pipeline
    time on 2 cores and are none of the test's business."""
    from ingest.file_tailer import Position, PositionStore
    from ingest.request_log_agent import RequestLogSource

    starts, positions = {}, {}
    for node in cluster.nodes:
        with open(node.request_log, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - 65536))
            tail = f.read()
        starts[node.node_id] = size - len(tail) + tail.rfind(b"\n") + 1
        source = RequestLogSource(watch_cluster, node.node_id, Path(node.request_log))
        positions[source.name] = Position(os.stat(node.request_log).st_ino,
                                          starts[node.node_id])
    PositionStore(Path(state_dir) / "request-log.json").save(positions)
    return starts
