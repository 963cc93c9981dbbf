"""infra/procfs.py: the one parser of /proc/<pid>/stat, on real processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from infra.procfs import PPID, STATE, pids, stat_fields

pytestmark = pytest.mark.unit


def test_a_real_process_line_parses_after_its_command_name(tmp_path):
    # a command name with a space and a ")" in it, as the kernel shows it in parentheses
    exe = tmp_path / "odd) name"
    exe.symlink_to(sys.executable)
    child = subprocess.Popen([str(exe), "-c", "import time; time.sleep(30)"])
    try:
        fields = stat_fields(child.pid)
        assert fields[STATE] in ("R", "S", "D") and int(fields[PPID]) == os.getpid()
        assert child.pid in pids() and os.getpid() in pids()
    finally:
        child.kill()
        child.wait()


def test_no_such_process_is_none():
    assert stat_fields(2 ** 22 + 7) is None
