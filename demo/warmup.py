"""Before the first fault: a healthy run, then a pipeline that keeps up with its input."""

from __future__ import annotations

import threading
import time

from demo.console import Progress
from demo.outcomes import FindingTracker

KEEPING_UP = 2.0   # a silver batch within this many trigger intervals keeps up


def wait_healthy(monitor, tracker: FindingTracker, seconds: float, stop: threading.Event,
                 p: Progress) -> None:
    end = time.monotonic() + seconds
    while not stop.is_set() and time.monotonic() < end:
        stop.wait(min(15.0, max(0.0, end - time.monotonic())))
        monitor.pipeline.check()
        p.note(f"warming up: {tracker.evaluations} detector evaluations, "
               f"{silver_batches(monitor)} silver batches so far")


def silver_batch_seconds(monitor) -> list[float]:
    """How long the `silver` query's last two micro-batches took."""
    for q in list(monitor.pipeline.queries):
        if q.name == "silver":
            return [(pr.get("durationMs") or {}).get("triggerExecution", 0) / 1000
                    for pr in q.recentProgress[-2:]]
    return []


def wait_keeping_up(monitor, seconds: float, stop: threading.Event, p: Progress) -> None:
    """Before the first fault, wait until silver keeps up with the telemetry: the first
    micro-batches (a cold JVM, the backlog of the start) take several trigger intervals,
    and a fault caused then would be timed with that backlog in front of it."""
    trigger = monitor.pipeline.settings.silver_trigger_s
    end = time.monotonic() + seconds
    while not stop.is_set():
        took = silver_batch_seconds(monitor)
        if len(took) == 2 and max(took) <= trigger * KEEPING_UP:
            p.note(f"the pipeline keeps up: its last silver batches took "
                   f"{' and '.join(f'{t:.0f} s' for t in took)} for a {trigger:.0f} s trigger")
            return
        if time.monotonic() >= end:
            p.note(f"silver still lags after {seconds:.0f} s more (last batches: "
                   f"{', '.join(f'{t:.0f} s' for t in took) or 'none'}); causing the faults "
                   f"anyway: their times to detect include that backlog")
            return
        p.note(f"waiting for the pipeline to keep up: last silver batches took "
               f"{', '.join(f'{t:.0f} s' for t in took) or 'none yet'} for a "
               f"{trigger:.0f} s trigger")
        stop.wait(10)
        monitor.pipeline.check()


def silver_batches(monitor) -> int:
    n = 0
    for q in list(monitor.pipeline.queries):
        if q.name.startswith("silver") and q.lastProgress:
            n += int(q.lastProgress["batchId"]) + 1
    return n
