"""Causing one fault and watching for the findings that show it.

Before a fault, open findings that would show it must resolve (else its own finding
would be an update of the old one); then the fault is injected, the detectors get their
full time from the moment it is in place, and once it is detected the demo waits a while
for the findings of its effects (the chain), which do not count in its time to detect.
"""

from __future__ import annotations

import threading
import time

from core.findings import Status
from demo.console import Progress
from demo.outcomes import (FaultOutcome, FindingTracker, finding_line, record_finding,
                           refresh_findings)
from demo.preflight import DemoError
from demo.settings import DemoSettings

NOTE_EVERY_S = 15.0   # a progress note while waiting, so nobody wonders whether it hung


def all_faults(brokers: int) -> list:
    from demo.faults.compaction_lag import CompactionLag
    from demo.faults.offset_rewind import OffsetRewinds
    from demo.faults.slow_broker import SlowBroker
    from demo.faults.unclean_election import UncleanElection

    return [SlowBroker(broker=min(2, brokers)), OffsetRewinds(),
            CompactionLag(broker=min(3, brokers)), UncleanElection()]


def select_faults(brokers: int, names: list[str] | None) -> list:
    """The faults to cause, in their fixed order; all of them unless `names` picks some."""
    faults = all_faults(brokers)
    if not names:
        return faults
    unknown = set(names) - {f.name for f in faults}
    if unknown:
        raise DemoError(f"unknown fault(s) {', '.join(sorted(unknown))}: choose from "
                        f"{', '.join(f.name for f in faults)}")
    return [f for f in faults if f.name in names]


def already_showing(fault, findings) -> list:
    """Open findings that would show the fault (one of its parts) before it is caused: a
    finding that persists is updated, not raised again, so while one is open the fault's
    own finding cannot appear (seen: a frozen cleaner's compaction_lag on every broker
    during the slow-broker fault, still open when the compaction fault began)."""
    return [f for f in findings
            if f.status is Status.OPEN and fault.part_of(f) in fault.parts]


def wait_until_clear(fault, tracker: FindingTracker, settings: DemoSettings,
                     stop: threading.Event, p: Progress) -> None:
    end = time.monotonic() + settings.clear_wait_s
    last_note = 0.0
    while not stop.is_set():
        showing = already_showing(fault, tracker.open_findings())
        if not showing:
            return
        if time.monotonic() >= end:
            p.note(f"still open after {settings.clear_wait_s:.0f} s, so this fault's own "
                   f"finding may not show: {'; '.join(finding_line(f) for f in showing)}")
            return
        if time.monotonic() - last_note >= NOTE_EVERY_S:
            last_note = time.monotonic()
            p.note(f"waiting for {len(showing)} earlier finding(s) that look like this fault "
                   f"to resolve: {', '.join(f'{f.type.value} {f.entity}' for f in showing)}")
        stop.wait(2.0)


class DetectionWatch:
    """Counts the tracker's findings for one fault, from its start; knows when to stop
    waiting (detected, timed out, or Ctrl-C) and notes progress meanwhile."""

    def __init__(self, fault, outcome: FaultOutcome, tracker: FindingTracker, monitor,
                 settings: DemoSettings, stop: threading.Event, p: Progress):
        self.fault, self.outcome, self.tracker, self.monitor = fault, outcome, tracker, monitor
        self.settings, self.stop, self.p = settings, stop, p
        self.started_ms = outcome.started_ms
        self.restart_clock()
        self.last_note = time.monotonic()

    def restart_clock(self) -> None:
        """The detectors get their full time from now (the fault is in place)."""
        self.deadline = time.monotonic() + self.settings.detect_timeout_s

    def check(self) -> bool:
        for t, f in self.tracker.since(self.started_ms):
            record_finding(self.outcome, self.fault, t, f)
        return self.outcome.detected

    def done(self) -> bool:
        self.monitor.pipeline.check()
        if time.monotonic() - self.last_note >= NOTE_EVERY_S:
            self.last_note = time.monotonic()
            self.p.note(f"waiting for the detectors: "
                        f"{(time.time() * 1000 - self.started_ms) / 1000:.0f} s since the fault "
                        f"started, {self.tracker.evaluations} evaluations so far")
        return self.check() or time.monotonic() > self.deadline or self.stop.is_set()


def wait_for_effects(fault, outcome: FaultOutcome, check, settings: DemoSettings,
                     stop: threading.Event, p: Progress) -> None:
    """After the detection, wait (at most effects_wait_s) for the findings of the fault's
    effects, so the summary shows the whole chain; the time to detect stays as it was."""
    end = time.monotonic() + settings.effects_wait_s
    last_note = time.monotonic()
    while not stop.is_set():
        check()
        missing = [e for e in fault.effects if e not in outcome.parts_seen]
        if not missing:
            p.note(f"its effects are in: {', '.join(fault.effects)}")
            return
        if time.monotonic() >= end:
            p.note(f"no finding for {', '.join(missing)} within "
                   f"{settings.effects_wait_s:.0f} s of the detection; going on")
            return
        if time.monotonic() - last_note >= NOTE_EVERY_S:
            last_note = time.monotonic()
            p.note(f"detected; waiting for the findings of its effects ({', '.join(missing)}): "
                   f"{settings.effects_wait_s - (end - time.monotonic()):.0f} s so far")
        stop.wait(1.0)


def cause_fault(fault, ctx, tracker: FindingTracker, settings: DemoSettings,
                stop: threading.Event, p: Progress, monitor) -> FaultOutcome:
    """Cause the fault, wait for its detection and effects, heal it; its outcome."""
    from demo.faults.base import FaultRun

    wait_until_clear(fault, tracker, settings, stop, p)
    started = int(time.time() * 1000)
    run = FaultRun(fault.name, started)
    outcome = FaultOutcome(fault.name, fault.title, started, notes=run.notes)
    watch = DetectionWatch(fault, outcome, tracker, monitor, settings, stop, p)
    try:
        inject(fault, ctx, run, watch)
        while not watch.done():
            stop.wait(1.0)
        if outcome.detected and fault.effects:
            wait_for_effects(fault, outcome, watch.check, settings, stop, p)
    finally:
        fault.heal(ctx)
    finish(outcome, run, tracker, started)
    return outcome


def inject(fault, ctx, run, watch: DetectionWatch) -> None:
    if fault.name == "slow_broker":
        # Freezes in bursts until detected (or timed out): the fault is its own wait.
        fault.inject(ctx, run, until=watch.done)
    else:
        fault.inject(ctx, run)
        # Causing some faults takes a while (stopping and restarting brokers): the
        # detectors get their full time from the moment the fault is in place.
        watch.restart_clock()
    run.injected_ms = int(time.time() * 1000)


def finish(outcome: FaultOutcome, run, tracker: FindingTracker, started: int) -> None:
    """The outcome's findings in their latest state, timed from the damage."""
    refresh_findings(outcome, {f.finding_id: f for _, f in tracker.since(started)})
    # Time to detect runs from when the damage was done (the reset commit, the election).
    outcome.started_ms = run.fault_ms or started
    if outcome.detected_ms is not None and outcome.detected_ms < outcome.started_ms:
        outcome.started_ms = started   # seen before the marked moment: count from the start
    # Every finding that appeared during the fault, for the record (related effects too).
    outcome.notes["all_findings"] = [finding_line(f) for _, f in tracker.since(started)]
