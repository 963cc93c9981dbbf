"""A second run of the setup command downloads nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kmon.config import load_config


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def test_second_setup_downloads_nothing(tmp_path):
    kmon = [sys.executable, "-m", "cli"]
    work = load_config().work_dir
    first = subprocess.run(kmon + ["setup"], capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr
    before_m2, before_jvm = snapshot(work / "m2"), snapshot(work / "jvm")
    # An unreachable repository, and an `mvn` first on PATH that records being run.
    tripwire = tmp_path / "bin" / "mvn"
    tripwire.parent.mkdir()
    tripwire.write_text(f"#!/bin/sh\ntouch {tmp_path}/mvn-was-run\nexit 97\n")
    tripwire.chmod(0o755)
    env = dict(os.environ, KMON__JVM__MAVEN_REPO="http://127.0.0.1:9/unreachable",
               PATH=f"{tripwire.parent}{os.pathsep}{os.environ['PATH']}")
    second = subprocess.run(kmon + ["setup"], capture_output=True, text=True, timeout=300, env=env)
    assert second.returncode == 0, second.stderr
    assert not (tmp_path / "mvn-was-run").exists(), "setup ran Maven on the second run"
    assert "nothing downloaded" in second.stdout
    assert snapshot(work / "m2") == before_m2
    assert snapshot(work / "jvm") == before_jvm
