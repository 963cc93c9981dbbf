"""Every detector behind one small interface, evaluated by one loop.

A `Detector` is its config section, the inputs it reads (the read side's DetectorInputs
fields, by the name its rules call them) and its rules: `run_detectors` calls each one's
rules with those inputs, its section and the evaluation time, in the order of DETECTORS,
and hands on what they detect. A new detector is a module of rules and one entry here;
the read side reads what the entries name (evaluation/inputs/).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from core.findings import Detection
from detectors.compaction_lag import detect_compaction_lag
from detectors.offset_rewind import detect_offset_anomalies
from detectors.slow_broker import detect_slow_brokers
from detectors.slow_broker.judged import JudgedWindows
from detectors.slow_client import detect_slow_clients
from detectors.unclean_election import detect_unclean_elections


@dataclass(frozen=True)
class Detector:
    """One detector. `reads`: its rules' argument -> the input field that fills it (the
    first is passed by position); `timed`: the rules take the evaluation time (now_ms);
    `carry`: makes what the rules carry from one evaluation to the next (`carried`)."""
    name: str
    section: str
    reads: Mapping[str, str]
    rules: Callable[..., list[Detection]]
    timed: bool = False
    carry: Callable[[], Any] | None = None

    def run(self, inputs: Any, config: Any, now_ms: int,
            carried: dict[str, Any] | None = None) -> list[Detection]:
        """Its detections over one range's `inputs` (an object with the named fields),
        judged by its section of `config`; `carried`: per detector, what the caller's
        earlier evaluations left (None: nothing is carried)."""
        (first, field), *rest = self.reads.items()
        kwargs = {arg: getattr(inputs, f) for arg, f in rest}
        if self.timed:
            kwargs["now_ms"] = now_ms
        if self.carry is not None and carried is not None:
            kwargs["carried"] = carried.setdefault(self.name, self.carry())
        return self.rules(getattr(inputs, field), config=getattr(config, self.section),
                          **kwargs)


_STAGE_READS = {"rows": "stage_windows", "client_sends": "client_sends"}

DETECTORS: tuple[Detector, ...] = (
    Detector("slow_broker", "slow_broker", {
        **_STAGE_READS, "follower_fetches": "follower_fetches", "isr_shrinks": "isr_shrinks",
        "baselines": "baselines", "outages": "broker_outages",
        "replica_starts": "replica_starts", "held_requests": "held_requests"},
        detect_slow_brokers, carry=JudgedWindows),
    Detector("slow_client", "slow_broker", {
        **_STAGE_READS, "client_rtts": "client_rtts", "producer_times": "producer_times",
        "outages": "broker_outages", "replica_starts": "replica_starts"},
        detect_slow_clients),
    Detector("offset_rewind", "offset_rewind", {
        "commits": "commits", "offsets": "partition_offsets", "resets": "resets",
        "memberships": "memberships", "truncations": "truncations",
        "commit_requests": "commit_requests", "coordinator_loads": "coordinator_loads",
        "elections": "elections", "removals": "removals"}, detect_offset_anomalies,
        timed=True),
    Detector("compaction_lag", "compaction_lag", {
        "gauges": "cleaner_gauges", "runs": "cleaner_runs", "topic_configs": "topic_configs",
        "sizes": "partition_sizes", "contract_sizes": "contract_sizes",
        "outages": "broker_outages"},
        detect_compaction_lag),
    Detector("unclean_election", "unclean_election", {
        "elections": "elections", "meter_ticks": "meter_ticks", "truncations": "truncations",
        "offsets": "partition_offsets", "commits": "commits",
        "leader_epochs": "leader_epochs"}, detect_unclean_elections, timed=True),
)


def run_detectors(inputs: Any, config: Any, now_ms: int,
                  detectors: tuple[Detector, ...] = DETECTORS,
                  carried: dict[str, Any] | None = None) -> list[Detection]:
    """Every detector over one range's inputs, in order (`carried`: `Detector.run`'s)."""
    return [d for det in detectors for d in det.run(inputs, config, now_ms, carried)]
