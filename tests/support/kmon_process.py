"""`kmon` as a child process, started and stopped the way an operator does it.

Integration tests that need the real command (its Spark JVM, its signal handling, its
exit code) run it through these: `kmon_env` points it at a test's lake and local cluster,
`start_kmon` starts it in its own process group with its output in a log file, `ctrl_c`
stops it as Ctrl-C in a terminal would and `kill9` kills it outright.
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
