"""What a matrix scenario's fault adds to a demo fault: its class and its ground truth.

A `MatrixFault` is a `demo.faults.base.Fault` (prepare, inject, heal; the live runner
drives it the way the demo drives its four) that also states what a correct monitor finds:
`expect()` (each must be found) and `explained()` (effects a monitor may report). Its
`parts` and `part_of` follow from `expect()`, so the runner knows when it is detected.

Mechanisms that keep a fault going until it is detected (a broker frozen in bursts) set
`runs_until_detected` and take `until` in `inject`, as demo.faults.slow_broker does.
"""

from __future__ import annotations

from demo.faults.base import Fault, FaultRun
from detectors.slow_broker.blame import OWN_STAGE_CAUSES
from matrix.truth import Expect, GroundTruth


def finding_dict(f) -> dict:
    """A core.findings.Finding as the plain dict ground truth and scores work on."""
    return {"finding_id": f.finding_id, "type": f.type.value, "entity": f.entity,
            "cause": f.cause, "severity": f.severity.value, "first_seen_ms": f.first_seen_ms,
            "incident_id": f.incident_id, "explanation": f.explanation}


# When a broker is lost (killed, stopped, fenced), a group coordinator's appends to
# __consumer_offsets wait for it until it leaves the ISR, and clients retry their commits:
# an older commit of a member can land after its newer one and be undone by the next
# (seen live on coordinator-failover-3b). A broker that is slow rather than lost does the
# same to the commits it follows (seen live on cpu-starved-3b: the coordinator held
# members' commits for 1-3 s waiting on the starved follower, and the clients sent them
# again). kmon reports that at info as commit_reordered; a correct monitor may, in any
# scenario that loses or slows a broker.
COMMITS_RETRIED = Expect("a member's retried commit landing after its newer one",
                         "offset_rewind", r"group:.+", ("commit_reordered",), ("info",))

# While a broker is out, the brokers that share partitions with it take over its
# leaderships and clients, and on a loaded host their own stages slow down (seen live:
# crash-restart-3b, controller-failover-5b). kmon reports that as a warning victim of the
# outage, with no action (detectors/slow_broker/excuses.py); a correct monitor may, in any
# scenario that takes a broker out. A HIGH page on such a broker stays unexplained.
PARTNERS_LOADED = Expect("a broker loaded by another's outage", "slow_broker", r"broker:\d+",
                         tuple(sorted(OWN_STAGE_CAUSES)), ("warning",))


class MatrixFault(Fault):
    fault_class = "healthy"
    runs_until_detected = False
    # After the fault is in place (and found, when something is expected), how long the
    # runner keeps watching for findings ground truth does not explain.
    observe_s = 45.0

    def expect(self) -> tuple[Expect, ...]:
        return ()

    def explained(self) -> tuple[Expect, ...]:
        return ()

    @property
    def parts(self) -> tuple[str, ...]:   # type: ignore[override]
        return tuple(e.part for e in self.expect())

    def part_of(self, finding) -> str | None:
        d = finding_dict(finding)
        return next((e.part for e in self.expect() if e.names(d)), None)

    def interim(self) -> tuple[Expect, ...]:
        """States a finding may show before its last one (truth.GroundTruth.interim)."""
        return ()

    def truth(self, run: FaultRun, scenario: str) -> GroundTruth:
        return GroundTruth(scenario, self.fault_class, run.fault_ms or run.started_ms,
                           self.expect(), self.explained(), dict(run.notes), self.interim())
