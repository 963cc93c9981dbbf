"""A process's line in /proc/<pid>/stat, the one parser of it (Linux only)."""

from __future__ import annotations

import os

# Indexes into `stat_fields`: the fields after the command name, from the state letter on.
STATE, PPID, UTIME, STIME = 0, 1, 11, 12


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces and
    parentheses: the line is split after its last ")"); None when there is no such pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            line = f.read()
    except OSError:
        return None
    fields = line.rsplit(")", 1)[-1].split()
    return fields or None


def pids() -> list[int]:
    """Every process id in /proc now."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]
