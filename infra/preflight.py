"""Checks run before kmon starts anything, each failing with one line that says what to do."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

MIN_PYTHON = (3, 11)
MIN_JAVA = 17
MIN_FREE_DISK_GB = 2.0


class PreflightError(RuntimeError):
    """Something the machine lacks; the message is one line saying what to do."""


def check_python(version: tuple[int, int] = sys.version_info[:2]) -> None:
    if tuple(version) < MIN_PYTHON:
        raise PreflightError(
            f"Python {'.'.join(map(str, MIN_PYTHON))}+ is needed, this is "
            f"{'.'.join(map(str, version))}: install python3.11 and rerun ./kmonw")


def java_major(version_output: str) -> int | None:
    """'openjdk version "17.0.15" 2025-04-15' -> 17; '"1.8.0_392"' -> 8."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def check_java(java_home: str = "") -> str:
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise PreflightError("Java 17 is not installed: apt-get install openjdk-17-jdk-headless "
                             "(or set jvm.java_home), then rerun")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    major = java_major(out)
    if major is None or major < MIN_JAVA:
        raise PreflightError(f"Java {MIN_JAVA}+ is needed, {java} is "
                             f"{major or 'unknown'}: install openjdk-17 or set jvm.java_home")
    return java


def check_disk(path: Path, min_free_gb: float = MIN_FREE_DISK_GB) -> None:
    path = Path(path)
    probe = path if path.exists() else path.parent
    while not probe.exists():
        probe = probe.parent
    free_gb = shutil.disk_usage(probe).free / 1e9
    if free_gb < min_free_gb:
        raise PreflightError(f"only {free_gb:.1f} GB free under {probe}; kmon needs "
                             f"{min_free_gb:.0f} GB for jars, brokers and the lake: free some space "
                             f"or set kmon.work_dir to a bigger disk")


def check_maven() -> None:
    if shutil.which("mvn") is None:
        raise PreflightError("Maven (mvn) is not installed: apt-get install maven, or run "
                             "./kmonw setup which installs it")
