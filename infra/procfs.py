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


def machine_cpu_s() -> tuple[float, float]:
    """CPU seconds the whole machine spent since boot, from /proc/stat's first line: at
    normal priority (user, system, irq, softirq) and at a raised nice value, apart."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = ticks
    hz = os.sysconf("SC_CLK_TCK")
    return (user + system + irq + softirq) / hz, nice / hz
