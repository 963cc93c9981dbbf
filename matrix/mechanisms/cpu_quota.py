"""A slow broker starved of CPU: its JVM in a cgroup (v1) with a small CPU quota.

A broker short of CPU does everything late: its network and request-handler threads wait
for the scheduler, so requests queue and each stage takes longer; as a follower it fetches
late, so the leaders' acks=all Produce requests wait for it in Remote. Unlike SIGSTOP
bursts (demo.faults.slow_broker) the broker is never stopped outright: it is slow all the
time, like a broker on an oversubscribed host or a noisy neighbour.

How: a cgroup ``<cpu root>/kmon-matrix-<broker>`` (the cpu controller's v1 hierarchy,
/sys/fs/cgroup/cpu on this machine) with cpu.cfs_quota_us = quota_share of one core per
cpu.cfs_period_us, and the broker's process moved into it (its pid to cgroup.procs, which
moves every thread; threads it starts later are born inside). Heal moves whatever is
still in the group back to the cgroup the broker came from and removes the group; a
broker restarted in the meantime has a new pid outside the group, and a pid that is gone
is skipped.

Expected: slow_broker on the starved broker with a cause that blames the broker itself
(or it as the slow follower). Explained: its victims, the other leaders whose acks=all
Produce waits for it (remote_produce_slow_follower). Not explained: cluster_wide_slowness,
the one thing the fault must not look like.

Measured (3 brokers, the demo workload, broker 2 starved for 35 s): at 5% of one core its
Produce TP99 went from 12 to 1,398 ms and its Fetch TP99 (long polls of 500 ms) from 503 to
1,194 ms (consumer fetches 1,597 ms); the victims' Produce TP99 rose to 443 and 848 ms, all
in Remote; the broker stayed registered and no ISR shrank. At 15% nothing showed (Produce
TP99 62 ms): the default is 5%.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path

from demo.faults.base import FaultContext, FaultRun, now_ms
from matrix.fault import COMMITS_RETRIED, MatrixFault
from matrix.mechanisms.demo_faults import culprit, victims
from matrix.truth import Expect

log = logging.getLogger(__name__)

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000


def quota_us(share: float, period_us: int = PERIOD_US) -> int:
    """cpu.cfs_quota_us for `share` of one core per period (the kernel's floor is 1 ms)."""
    if not 0 < share:
        raise ValueError(f"quota_share must be positive, got {share}")
    return max(1000, round(share * period_us))


def cpu_cgroup_of(pid: int) -> str | None:
    """The pid's path in the v1 cpu hierarchy ("/" for the root), None if it is gone."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    return parse_cpu_cgroup(lines)


def parse_cpu_cgroup(lines: list[str]) -> str | None:
    """From /proc/<pid>/cgroup lines ("4:cpu,cpuacct:/a/b"), the cpu controller's path."""
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and "cpu" in parts[1].split(","):
            return parts[2]
    return None


def _write(path: Path, value) -> bool:
    """Write one value to a cgroup file; False when the pid is gone (ESRCH)."""
    try:
        path.write_text(f"{value}\n")
        return True
    except ProcessLookupError:
        return False
    except OSError as e:
        if e.errno == errno.ESRCH:
            return False
        raise


class CpuStarvedBroker(MatrixFault):
    name = "cpu_starved_broker"
    title = "slow broker (starved of CPU by a cgroup quota)"
    fault_class = "slow_broker"
    runs_until_detected = True

    def __init__(self, broker: int = 2, quota_share: float = 0.05, duration_s: float = 240.0,
                 period_us: int = PERIOD_US, cpu_root: Path = CPU_ROOT):
        self.broker, self.quota_share, self.duration_s = broker, quota_share, duration_s
        self.period_us, self.cpu_root = period_us, Path(cpu_root)
        self._home: Path | None = None   # the cgroup the broker came from

    @property
    def group(self) -> Path:
        return self.cpu_root / f"kmon-matrix-{self.broker}"

    def expect(self) -> tuple[Expect, ...]:
        return (culprit(self.broker, f"CPU-starved broker {self.broker}"),)

    def explained(self) -> tuple[Expect, ...]:
        return (victims(self.broker, f"leaders held back by broker {self.broker}"),
                COMMITS_RETRIED)

    def starve(self, pid: int) -> None:
        """Create the group with its quota and move the broker (every thread) into it."""
        home = cpu_cgroup_of(pid)
        if home is None:
            raise RuntimeError(f"broker {self.broker} (pid {pid}) is not running")
        self._home = self.cpu_root / home.lstrip("/")
        self.group.mkdir(exist_ok=True)
        _write(self.group / "cpu.cfs_period_us", self.period_us)
        _write(self.group / "cpu.cfs_quota_us", quota_us(self.quota_share, self.period_us))
        if not _write(self.group / "cgroup.procs", pid):
            raise RuntimeError(f"broker {self.broker} (pid {pid}) exited")
        for tid in os.listdir(f"/proc/{pid}/task"):   # cgroup.procs moved them; make sure
            _write(self.group / "tasks", tid)

    def inject(self, ctx: FaultContext, run: FaultRun, until=None) -> None:
        """Starve the broker until `until()` is true (the finding arrived) or duration_s."""
        pid = ctx.cluster.node(self.broker).pid
        quota = quota_us(self.quota_share, self.period_us)
        ctx.say(f"starving broker {self.broker} (pid {pid}) of CPU: {quota} us of every "
                f"{self.period_us} us ({self.quota_share:.0%} of one core)")
        run.notes.update(broker=self.broker, pid=pid, quota_share=self.quota_share,
                         cfs_quota_us=quota, cfs_period_us=self.period_us,
                         cgroup=str(self.group))
        deadline = time.monotonic() + self.duration_s
        try:
            self.starve(pid)
            run.fault_ms = now_ms()
            while time.monotonic() < deadline and not ctx.stopping():
                if until is not None and until():
                    break
                time.sleep(0.5)
        finally:
            self.heal(ctx)

    def heal(self, ctx: FaultContext) -> None:
        """Move what is left in the group back home and remove the group. Idempotent."""
        if not self.group.exists():
            return
        home = self._home or self.cpu_root
        try:
            pids = (self.group / "cgroup.procs").read_text().split()
        except OSError:
            pids = []
        for pid in pids:
            if not _write(home / "cgroup.procs", pid):
                log.info("pid %s left the cgroup by exiting", pid)
        for _ in range(20):   # rmdir fails (EBUSY) while a task is still being moved
            try:
                self.group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise
                for tid in (self.group / "tasks").read_text().split():
                    _write(home / "tasks", tid)
                time.sleep(0.1)
        log.warning("could not remove %s", self.group)
