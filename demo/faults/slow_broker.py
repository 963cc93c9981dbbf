"""A slow broker: one broker frozen (SIGSTOP) for 1.5 s of every 2 s, like long GC pauses.

Requests caught inside the broker during a freeze wait it out, so its request TP99 climbs
well above 300 ms; the other leaders wait for it as a follower (no fetch from it for
longer than the slow-broker rules' LATE_FLOOR_MS, 1 s), so their acks=all Produce requests
spend that time in Remote and the detector attributes it to this follower. Expected: a
slow_broker finding naming the frozen broker, not a cluster-wide event. Shorter freezes
(0.7 s of every 1 s, tried) leave the follower gaps under the 1 s floor: every broker
then looks slow at once and the detector, rightly by its rules, calls it cluster-wide.
"""

from __future__ import annotations

import time

from core.findings import AnomalyType
from demo.faults.base import Fault, FaultContext, FaultRun


class SlowBroker(Fault):
    name = "slow_broker"
    title = "slow broker (freezes in bursts)"

    def __init__(self, broker: int = 2, freeze_s: float = 1.5, thaw_s: float = 0.5,
                 duration_s: float = 240.0):
        self.broker, self.freeze_s, self.thaw_s = broker, freeze_s, thaw_s
        self.duration_s = duration_s
        self._frozen = False

    def inject(self, ctx: FaultContext, run: FaultRun, until=None) -> None:
        """Freeze/thaw until `until()` is true (the finding arrived), or for duration_s."""
        ctx.say(f"freezing broker {self.broker} for {self.freeze_s:.1f}s of every "
                f"{self.freeze_s + self.thaw_s:.1f}s")
        run.notes.update(broker=self.broker, freeze_s=self.freeze_s, thaw_s=self.thaw_s)
        deadline = time.monotonic() + self.duration_s
        bursts = 0
        try:
            while time.monotonic() < deadline and not ctx.stopping():
                if until is not None and until():
                    break
                ctx.cluster.pause(self.broker)
                self._frozen = True
                time.sleep(self.freeze_s)
                ctx.cluster.resume(self.broker)
                self._frozen = False
                bursts += 1
                time.sleep(self.thaw_s)
        finally:
            self.heal(ctx)
        run.notes["bursts"] = bursts

    def part_of(self, finding) -> str | None:
        """A slow_broker finding on the frozen broker: slow itself, or the slow follower."""
        if finding.type is AnomalyType.SLOW_BROKER and finding.entity == f"broker:{self.broker}":
            return "finding"
        return None

    def heal(self, ctx: FaultContext) -> None:
        if self._frozen:
            ctx.cluster.resume(self.broker)
            self._frozen = False
