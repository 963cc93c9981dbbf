"""`kmon matrix run`: scenarios on real clusters, scored live and recorded.

Per topology, one session (demo.runner.LiveDemo's steps): a fresh local cluster of that
shape, the demo's workload, kmon's Monitor (agents, streaming pipeline, detectors,
exporter) and a healthy warm-up; then each scenario in turn:

1. wait until no open finding already shows the fault (demo.cause.wait_until_clear);
2. inject; wait until every expected finding was handed over or `detect_timeout_s`
   passed; watch `observe_s` more for findings nothing explains; heal; settle;
3. score every finding first handed over from the start to the end of the settle time
   against the scenario's ground truth (times are wall times from the fault becoming
   visible to the finding reaching the exporter); record the scenario's telemetry into
   the corpus.

A scenario that fails to be caused is scored as such (its error in the results) and the
session goes on.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from demo.cause import DetectionWatch, wait_until_clear
from demo.faults.base import FaultRun
from demo.outcomes import FaultOutcome
from demo.runner import LiveDemo
from demo.settings import DemoSettings
from jobs.pipeline import PipelineFailed
from matrix.corpus import CORPUS_DIR, keep_evaluations, record
from matrix.fault import finding_dict
from matrix.scenarios import Scenario, Topology
from matrix.score import ScenarioScore, score, states_json
from matrix.truth import GroundTruth

log = logging.getLogger(__name__)

HISTORY_S = 120        # healthy telemetry kept before a fault (the detectors' baselines:
                       # slow_broker needs MIN_HISTORY_WINDOWS, 60 s, of healthy windows)
HISTORY_GAP_S = 20     # ... starting at least this long after the previous scenario healed


@dataclass(frozen=True)
class MatrixSettings(DemoSettings):
    detect_timeout_s: float = 150.0   # a finding later than 60 s fails anyway; this
                                      # measures how late
    settle_s: float = 90.0            # after heal: late findings still count; then the next
                                      # scenario's recorded history starts (HISTORY_GAP_S)
    warmup_s: float = 150.0
    client_stats: bool = True         # the slow-link rule judges producers by them


@dataclass
class ScenarioResult:
    scenario: Scenario
    score: ScenarioScore
    started_ms: int
    ended_ms: int
    notes: dict
    recording: str | None = None
    error: str | None = None
    truth: GroundTruth | None = None
    seen: list = dataclasses.field(default_factory=list)   # (handed over ms, finding dict)

    def late(self, carried: list) -> None:
        """Findings handed over after this scenario ended whose evidence began before its
        fault was healed: its effects, found late; scored here, not in the next."""
        self.seen += carried
        self.score = score(self.truth, self.seen)
        self.notes["seen"] = [*self.notes.get("seen", []), *(
            f"{(t - self.truth.fault_ms) / 1000:+.0f}s (after the end, seen from before its "
            f"heal) {d['severity']} {d['type']} ({d['cause']}) {d['entity']}"
            for t, d in carried)]

    def to_json(self) -> dict:
        return {**self.score.to_json(), "topology": self.scenario.topology.name,
                "summary": self.scenario.summary, "started_ms": self.started_ms,
                "ended_ms": self.ended_ms, "recording": self.recording, "error": self.error,
                "notes": self.notes}


def split_late(seen: list, previous_healed_ms: int | None) -> tuple[list, list]:
    """A scenario's findings (handed over ms, finding dict), and those of the scenario
    before it: evidence that began before that one's fault was healed is its effect,
    however late it was handed over (the heal is settle_s before this scenario starts,
    so none of this one's own evidence is that old)."""
    if previous_healed_ms is None:
        return seen, []
    carried = [(t, d) for t, d in seen
               if d.get("first_seen_ms") is not None and d["first_seen_ms"] < previous_healed_ms]
    return [x for x in seen if x not in carried], carried


class LiveEvaluations:
    """What the monitor's evaluations read, (time, DetectorInputs) in order: a failed
    scenario's recording keeps those of its span, so `kmon matrix rescore` runs the
    detectors over the data as it had arrived live, not as a replay sees it (complete by
    event time), and a race between telemetry that arrived late comes back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: list = []

    def __call__(self, now_ms: int, inputs) -> None:
        with self._lock:
            self._kept.append((now_ms, inputs))

    def span(self, start_ms: int, end_ms: int) -> list:
        with self._lock:
            return [(t, i) for t, i in self._kept if start_ms <= t <= end_ms]

    def forget_before(self, ms: int) -> None:
        with self._lock:
            self._kept = [(t, i) for t, i in self._kept if t >= ms]


class MatrixSession(LiveDemo):
    """One topology's scenarios on one cluster."""

    def __init__(self, config, topology: Topology, scenarios: list[Scenario], *,
                 settings: MatrixSettings, port: int, corpus: Path | None, meta: dict, out,
                 failed_dir: Path | None = None):
        """`corpus`: record every scenario there; else `failed_dir`: record there the
        scenarios that did not pass, so that a failure seen live can be replayed and its
        rule fixed against it (a live run's lake is overwritten by the next)."""
        self.scenarios = scenarios
        super().__init__(config, settings, port, [s.make() for s in scenarios], keep=False,
                         out=out)
        self.topology, self.corpus, self.meta = topology, corpus, meta
        self.failed_dir = failed_dir
        self.evaluations = self.on_inputs = LiveEvaluations()
        self.results: list[ScenarioResult] = []
        self.healed_ms = 0
        self.unhealed: str | None = None     # why the last heal failed, if it did
        self.pipeline_failed: str | None = None   # why the monitor's pipeline stopped

    def cluster_step(self) -> str:
        return f"starting a real Kafka cluster (KRaft): {self.topology.describe()}"

    def before_cluster_start(self, cluster) -> None:
        """A fault that must sit in the cluster's paths (a delaying proxy in front of a
        broker) is installed before the brokers start."""
        for f in self.faults:
            if hasattr(f, "install"):
                f.install(cluster)

    def tear_down(self) -> None:
        try:
            super().tear_down()
        finally:
            for f in self.faults:
                if hasattr(f, "uninstall"):
                    f.uninstall()

    def run_all(self, on_result=None) -> list[ScenarioResult]:
        """Every scenario of the session in turn; `on_result(result)` after each."""
        import signal

        self.previous_handlers = {s: signal.signal(s, self.on_signal)
                                  for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start_cluster()
            if not self.stop.is_set():
                self.start_workload()
                self.start_monitor()
                self.warm_up()
                self.healed_ms = self.warm_start_ms
                for i, (s, fault) in enumerate(zip(self.scenarios, self.faults), 1):
                    if self.stop.is_set():
                        break
                    self.p.note(f"--- scenario {i}/{len(self.scenarios)}: {s.name}: "
                                f"{s.summary} ---")
                    r = self.run_scenario(s, fault, on_result)
                    if self.pipeline_failed:
                        # The detectors saw nothing from then on: no try of theirs, so not
                        # scored; a --resume runs it and the rest with a fresh monitor.
                        self.p.note(f"{s.name}: the monitor's pipeline stopped "
                                    f"({self.pipeline_failed}); not scored, stopping here, "
                                    "--resume runs the rest")
                        break
                    if self.stop.is_set():
                        # Stopped (Ctrl-C) mid-scenario: its waits ended early, so its
                        # score would be a false failure; left out, a --resume runs it.
                        self.p.note(f"{s.name}: stopped before it ended, not scored")
                        break
                    self.results.append(r)
                    if on_result is not None:
                        on_result(r)
                    self.p.note(f"{s.name}: {'PASS' if r.score.passed else 'FAIL'}"
                                + "".join(f"\n        {x}" for x in r.score.failures()))
                    if self.unhealed:
                        # The cluster may still carry the fault: the next scenario would be
                        # judged on it. A --resume runs the rest on a fresh cluster.
                        self.p.note(f"{s.name} could not be healed ({self.unhealed}); "
                                    "stopping here, --resume runs the rest")
                        break
            return self.results
        finally:
            self.tear_down()

    def run_scenario(self, s: Scenario, fault, on_result=None) -> ScenarioResult:
        st = self.settings
        previous_healed_ms = self.healed_ms
        wait_until_clear(fault, self.tracker, st, self.stop, self.p)
        started = int(time.time() * 1000)
        history_from = max(started - HISTORY_S * 1000, self.healed_ms + HISTORY_GAP_S * 1000)
        self.evaluations.forget_before(history_from)
        run = FaultRun(s.name, started)
        outcome = FaultOutcome(s.name, s.summary, started, notes=run.notes)
        watch = DetectionWatch(fault, outcome, self.tracker, self.monitor, st, self.stop, self.p)
        error = None
        try:
            if fault.runs_until_detected:
                fault.inject(self.ctx, run, until=watch.done)
            else:
                fault.inject(self.ctx, run)
                watch.restart_clock()
            while fault.parts and not watch.done():
                self.stop.wait(1.0)
            self.p.note(f"watching {fault.observe_s:.0f} s more for unexplained findings")
            self.stop.wait(fault.observe_s)
        except PipelineFailed as e:
            log.exception("the monitor's pipeline stopped during scenario %s", s.name)
            self.pipeline_failed = str(e).splitlines()[0][:300]
            error = f"PipelineFailed: {self.pipeline_failed}"
        except Exception as e:  # noqa: BLE001 - score it as not caused, go on
            log.exception("scenario %s failed", s.name)
            error = f"{type(e).__name__}: {e}"
            self.p.note(f"{s.name}: could not be caused: {error}")
        finally:
            # Before the heal: a scenario's heal may delete the compacted topic whose
            # config its recording needs (which topics are compacted, for the replay).
            keeps = self.corpus is not None or self.failed_dir is not None
            configs = self.compacted_configs() if keeps else []
            try:
                fault.heal(self.ctx)
            except Exception as e:  # noqa: BLE001 - scored; the run stops after it
                log.exception("scenario %s could not be healed", s.name)
                self.unhealed = f"{type(e).__name__}: {e}"
                run.notes["heal_error"] = self.unhealed
        self.healed_ms = int(time.time() * 1000)
        self.stop.wait(st.settle_s)
        ended = int(time.time() * 1000)
        truth = fault.truth(run, s.name)
        seen = [(t, {**finding_dict(self.tracker.latest.get(f.finding_id, f)),
                     "evaluated_ms": self.tracker.evaluated_ms.get(f.finding_id),
                     "states": states_json(self.tracker.states.get(f.finding_id, []))})
                for t, f in self.tracker.since(started) if t <= ended]
        seen, carried = split_late(seen, previous_healed_ms if self.results else None)
        if carried:
            previous = self.results[-1]
            previous.late(carried)
            self.p.note(f"{len(carried)} finding(s) seen from before {previous.scenario.name}"
                        f" was healed, scored there: now "
                        f"{'PASS' if previous.score.passed else 'FAIL'}")
            if on_result is not None:
                on_result(previous)
        result = ScenarioResult(s, score(truth, seen), started, ended,
                                {**run.notes, "seen": [f"{(t - truth.fault_ms) / 1000:+.0f}s "
                                                       f"{d['severity']} {d['type']} "
                                                       f"({d['cause']}) {d['entity']}"
                                                       for t, d in seen]}, error=error,
                                truth=truth, seen=seen)
        if error is None and not self.stop.is_set():
            into = self.corpus if self.corpus is not None else (
                self.failed_dir if not result.score.passed else None)
            if into is not None:
                result.recording = str(self.record(s, truth, history_from, ended, configs,
                                                   into))
        return result

    def compacted_configs(self) -> list:
        from evaluation.inputs import describe_compacted_topics

        try:
            return describe_compacted_topics({"bootstrap.servers":
                                              self.cluster.bootstrap_servers},
                                             self.config.watch.cluster)
        except Exception:  # noqa: BLE001 - recorded without; the replay says what is missing
            log.exception("could not describe the compacted topics for the recording")
            return []

    def record(self, s: Scenario, truth: GroundTruth, start_ms: int, end_ms: int,
               configs: list, into: Path) -> Path:
        dest = record(Path(self.config.storage_root) / "landing", into / s.name,
                      scenario=s.name, title=s.summary,
                      topology=dataclasses.asdict(self.topology), truth=truth,
                      start_ms=start_ms, end_ms=end_ms,
                      topic_configs=[dataclasses.asdict(c) for c in configs],
                      overrides=self.topology.overrides(), meta=self.meta,
                      nodes=[(n.node_id, n.log_dir) for n in self.cluster.nodes],
                      history_s=self.config.unclean_election.replay_lookback_s)
        if into == self.failed_dir:
            keep_evaluations(dest, self.evaluations.span(start_ms, end_ms), None)
        self.p.note(f"recorded into {dest}")
        return dest


def topology_config(config, topology: Topology):
    """The demo's configuration on `topology`'s cluster, with a lake of its own
    (<work_dir>/demo/lake-<topology>): the one Spark session of a matrix run outlives each
    topology's queries, and its state-store maintenance can still write to a stopped
    query's checkpoint after the next topology's preflight removed the demo folder. In
    the demo's one lake that left state files in a checkpoint without offsets, and the
    next topology's silver query refused to start (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY,
    seen at the 3b-1c to 5b-3c change)."""
    from demo.settings import demo_config

    cfg = demo_config(config)
    lake = Path(cfg.storage_root).parent / f"lake-{topology.name}"
    overrides = topology.overrides()
    if topology.broker_config:   # over the demo's broker settings, not instead of them
        overrides["local_cluster"]["extra_broker_config"] = {
            **cfg.local_cluster.extra_broker_config, **dict(topology.broker_config)}
    return cfg.with_overrides(**overrides, spark={"storage_root": str(lake)})


def run_matrix(config, scenarios: list[Scenario], *, corpus: Path | None = CORPUS_DIR,
               settings: MatrixSettings | None = None, port: int = 0, meta: dict,
               out, on_result=None, failed_dir: Path | None = None) -> list[ScenarioResult]:
    """Every scenario, grouped by topology (one cluster each, in catalog order);
    `on_result(result)` after each; without a `corpus`, the failed ones are recorded
    into `failed_dir` (MatrixSession)."""
    from demo.lock import DemoLock
    from demo.preflight import preflight

    settings = settings or MatrixSettings()
    results: list[ScenarioResult] = []
    topologies: dict[str, list[Scenario]] = {}
    for s in scenarios:
        topologies.setdefault(s.topology.name, []).append(s)
    with DemoLock(config.work_dir / "demo.lock"):
        for name, group in topologies.items():
            topo = group[0].topology
            print(f"\n=== topology {name}: {topo.describe()}; {len(group)} scenario(s) ===",
                  file=out, flush=True)
            cfg = topology_config(config, topo)
            preflight(cfg, port)
            session = MatrixSession(cfg, topo, group, settings=settings, port=port,
                                    corpus=corpus, meta=meta, out=out,
                                    failed_dir=failed_dir)
            results += session.run_all(on_result)
            if session.stop.is_set():
                break
    return results
