"""The summary's action column: what the decision step did about each fault's findings
(from gold.remediation_decisions), one action per finding."""

from __future__ import annotations

import logging
import threading
import time

from demo.outcomes import FaultOutcome

log = logging.getLogger(__name__)

NOT_DECIDED = "not decided yet"


def action_for(monitor, outcome: FaultOutcome) -> str:
    """One line per finding that showed the fault: the action queued for it, else why
    none was."""
    if monitor.decisions is None or not outcome.findings:
        return "-"
    ids = [f.finding_id for _, f in outcome.findings]
    try:
        decisions = monitor.decisions.decisions.load(finding_ids=ids, since_ms=outcome.started_ms)
    except Exception as e:  # noqa: BLE001 - the summary still prints
        log.warning("reading decisions: %s", e)
        return "?"
    # load() also returns every decision taken since (what the queue's rate guards need):
    # keep this fault's.
    by_finding: dict[str, list] = {}
    for d in decisions:
        if d.finding_id in ids:
            by_finding.setdefault(d.finding_id, []).append(d)
    return "\n".join(one_action(by_finding.get(fid, [])) for fid in ids)


def one_action(decisions: list) -> str:
    """A finding's action: the one queued if any decision queued one; else the reason of
    the first decision (later ones are about its later state, e.g. "the finding is
    resolved", not about what it showed)."""
    if not decisions:
        return NOT_DECIDED
    acted = sorted((d for d in decisions if d.action is not None), key=lambda d: d.decided_ms)
    if acted:
        return f"{acted[0].action.kind.value} (dry run)"
    return f"none: {min(decisions, key=lambda d: d.decided_ms).reason}"


def fill_actions(monitor, outcomes: list[FaultOutcome], stop: threading.Event,
                 wait_s: float = 30.0) -> None:
    """Each fault's action column. The decision step runs after the detector query hands
    over its findings, so a fault detected in the last evaluation may have no decision
    yet (seen: 9 s later): wait up to wait_s for every detected fault's."""
    end = time.monotonic() + wait_s
    while True:
        for o in outcomes:
            o.action = action_for(monitor, o)
        pending = [o for o in outcomes if o.detected and NOT_DECIDED in o.action.split("\n")]
        if not pending or time.monotonic() >= end or stop.is_set():
            return
        stop.wait(2.0)
