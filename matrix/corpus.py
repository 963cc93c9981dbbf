"""A scenario's telemetry as the agents read it, kept small, and its replay.

Recording (`record`) keeps the scenario's time (a short healthy history before the fault
to the end of its settle time), with a manifest: the scenario, its ground truth, the
compacted topics' configs, the configuration overrides it ran under and its time range.

- The brokers' own files, as the agents read them: every node's kafka-request.log and its
  server, controller, state-change and log-cleaner logs, the lines stamped in the time
  range (with the unstamped lines that continue them), xz-compressed (`raw/node-<id>/`).
  A replay runs the real request-log and broker-log agents over them, so a parser change
  is judged on the recorded lines without recording again. From before the range the
  broker logs keep only the events that show leader epochs (`HISTORY_KINDS`), over the
  unclean-election detector's replay lookback (`history_s`): a controller restarted in
  the scenario logs again the elections of its metadata log, and only the epochs seen
  before tell those from new elections, live and in the replay alike.
- The other streams as their agents published them (`landing/<stream>/`, gzipped JSON
  lines with `ts_ms` in the range): JMX samples, __consumer_offsets commits and group
  metadata, end offsets, client logs and statistics. Commits and group membership are
  state, not events: they are kept from further back (`STATE_HISTORY_S`), so the
  detectors see the commit before a rewind and the group's members. Re-record when one
  of those agents' output changes.

Replaying (`prepare_replay` then `score_replay`; `replay_all` for many) builds a fresh
lake from a recording (of its JMX samples, the series a detector reads), runs every
pipeline query the detectors read from once over it (not the gold tables only dashboards
and reports read) and evaluates the detectors every `step_s` of the recorded time, as if
live (each evaluation starting from the last one's findings, as the detector query does;
nothing is written to gold.anomalies): a finding counts from the first evaluation that
hands it over. The score uses the same ground truth as the live run. Times in a replay
are detector time on complete data (no pipeline latency), so they are a lower bound of the
live ones.
"""

from __future__ import annotations

import gzip
import json
import lzma
import math
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from detectors.lost_range import EPOCH_KINDS
from ingest.request_window_records import STREAMS as REQUEST_WINDOW_STREAMS
from matrix.fault import finding_dict
from matrix.score import ScenarioScore, score, states_json
from matrix.truth import GroundTruth

CORPUS_DIR = Path(__file__).resolve().parents[1] / "tests" / "corpus"
STATE_STREAMS = ("offset_commits", "group_members")
# Streams the replay rebuilds from the raw broker files with the real agents: never
# recorded, and never copied from an older recording that kept them (their windows at the
# range's ends hold lines outside it, so a copy would count those twice or not at all).
FROM_RAW = ("request_stages", "log_events", "quarantine", *REQUEST_WINDOW_STREAMS)
REQUEST_LOG = "kafka-request.log"
BROKER_LOG_FILES = ("server.log", "controller.log", "state-change.log", "log-cleaner.log")
STATE_HISTORY_S = 600
# Broker-log events kept from before the recording (the kinds leader epochs are read from),
# and how far back by default: the unclean-election detector's replay_lookback_s.
HISTORY_KINDS = EPOCH_KINDS
EPOCH_HISTORY_S = 7200.0
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Recording:
    path: Path
    manifest: dict

    @property
    def scenario(self) -> str:
        return self.manifest["scenario"]

    @property
    def truth(self) -> GroundTruth:
        return GroundTruth.from_json(self.manifest["truth"])


def record(landing: Path, dest: Path, *, scenario: str, title: str, topology: dict,
           truth: GroundTruth, start_ms: int, end_ms: int, topic_configs: list[dict],
           overrides: dict, meta: dict, nodes: list[tuple[int, Path]],
           history_s: float = EPOCH_HISTORY_S) -> Path:
    """Keep [start_ms, end_ms] of the scenario in `dest` (see the module docstring), and
    the broker logs' leader-epoch events of the `history_s` before it: `nodes` are (node
    id, log folder) of every node; returns `dest`."""
    shutil.rmtree(dest, ignore_errors=True)
    counts, before = {}, {}
    for node, log_dir in nodes:
        for name in (REQUEST_LOG, *BROKER_LOG_FILES):
            lines = stamped_lines(Path(log_dir), name, start_ms, end_ms)
            if name != REQUEST_LOG and history_s > 0:
                history = history_events(Path(log_dir), name,
                                         start_ms - int(history_s * 1000), start_ms)
                if history:
                    before[f"node-{node}/{name}"] = len(history)
                lines = history + lines
            if lines:
                target = dest / "raw" / f"node-{node}"
                target.mkdir(parents=True, exist_ok=True)
                with lzma.open(target / f"{name}.xz", "wb", preset=9) as x:
                    x.writelines(lines)
                counts[f"node-{node}/{name}"] = len(lines)
    for stream_dir in sorted(p for p in Path(landing).iterdir() if p.is_dir()):
        if stream_dir.name in FROM_RAW:
            continue
        since = start_ms - (STATE_HISTORY_S * 1000 if stream_dir.name in STATE_STREAMS else 0)
        lines = [x for f in sorted(stream_dir.glob("*.jsonl"))
                 for x in f.read_bytes().splitlines(keepends=True)
                 if _in_range(x, since, end_ms)]
        if lines:
            target = dest / "landing" / stream_dir.name
            target.mkdir(parents=True, exist_ok=True)
            with gzip.open(target / f"{stream_dir.name}.jsonl.gz", "wb", compresslevel=9) as g:
                g.writelines(lines)
            counts[stream_dir.name] = len(lines)
    manifest = {"scenario": scenario, "title": title, "topology": topology,
                "start_ms": start_ms, "end_ms": end_ms, "truth": truth.to_json(),
                "topic_configs": topic_configs, "config_overrides": overrides,
                "lines": counts, "history_s": history_s, "history_kinds": list(HISTORY_KINDS),
                "history_events": before, **meta}
    dest.mkdir(parents=True, exist_ok=True)
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
    return dest


def stamped_lines(log_dir: Path, name: str, start_ms: int, end_ms: int) -> list[bytes]:
    """The lines of a broker log (its rolled files `<name>.N` first, oldest first) whose
    log4j stamp ``[yyyy-MM-dd HH:mm:ss,SSS]`` falls in the range, with the unstamped lines
    that follow them (stack traces, the cleaner's summaries). Stamps are read as UTC, as
    the agents read the local cluster's logs."""
    from ingest.log_time import STAMP_RE, stamp_to_ms

    files = sorted(log_dir.glob(f"{name}.[0-9]*"), key=lambda p: -int(p.suffix[1:])
                   if p.suffix[1:].isdigit() else 0) + [log_dir / name]
    out, keep = [], False
    for f in files:
        if not f.is_file():
            continue
        for line in f.read_bytes().splitlines(keepends=True):
            m = STAMP_RE.match(line[1:24].decode("ascii", "replace")) if line[:1] == b"[" else None
            if m is not None:
                try:
                    keep = start_ms <= stamp_to_ms(m.group(0)) <= end_ms
                except ValueError:
                    keep = False
            if keep:
                out.append(line if line.endswith(b"\n") else line + b"\n")
    return out


def history_events(log_dir: Path, name: str, since_ms: int, until_ms: int,
                   kinds: tuple[str, ...] = HISTORY_KINDS) -> list[bytes]:
    """The whole events of a broker log (a stamped line and the lines that continue it)
    stamped in [since_ms, until_ms) that the broker-log parser classes as one of `kinds`,
    as lines, in file order."""
    from ingest.broker_log import EventAssembler, parse_event

    out = []
    for event in EventAssembler().feed_all(stamped_lines(log_dir, name, since_ms, until_ms - 1)):
        if not isinstance(event, str):
            continue     # not UTF-8: the parser would quarantine it, no epoch in it
        rec = parse_event(event, cluster="", broker=0)
        if isinstance(rec, dict) and rec["kind"] in kinds:
            out.extend(line.encode() + b"\n" for line in event.split("\n"))
    return out


def _in_range(line: bytes, since: int, until: int) -> bool:
    try:
        ts = json.loads(line).get("ts_ms")
    except ValueError:
        return False   # a torn last line of a file being written
    return isinstance(ts, int) and since <= ts <= until


def recordings(corpus: Path = CORPUS_DIR, names: list[str] | None = None) -> list[Recording]:
    """Every recording in the corpus (or the named ones), in name order."""
    found = [Recording(p.parent, json.loads(p.read_text()))
             for p in sorted(Path(corpus).glob(f"*/{MANIFEST}"))]
    if names:
        unknown = set(names) - {r.scenario for r in found}
        if unknown:
            raise ValueError(f"no recording of {', '.join(sorted(unknown))} in {corpus}")
        found = [r for r in found if r.scenario in names]
    return found


def replay_config(config, rec: Recording, root: Path):
    """The configuration the recording ran under, on a fresh lake at `root`."""
    from demo.settings import demo_config

    overrides = {k: dict(v) for k, v in rec.manifest.get("config_overrides", {}).items()}
    overrides.setdefault("spark", {})["storage_root"] = str(root / "lake")
    # One silver query for every stream: the slow trigger only spaces live batches out,
    # and a replay runs each query once over everything (a second query cost ~20 s of
    # fixed work per recording on 2 cores).
    overrides.setdefault("pipeline", {})["slow_streams"] = []
    return demo_config(config).with_overrides(**overrides)


class EmptyLakes:
    """Lakes with every bronze and silver table created and no rows, one per pipeline
    layout (its streams and whether it keeps bronze), under `root`; a replay starts from a
    copy. Creating the tables costs 8-15 s a replay on 2 cores, copying an empty lake 10 ms;
    the replay's pipeline then skips its table check (`Pipeline.tables_current`)."""

    def __init__(self, spark, root: Path):
        self.spark, self.root = spark, Path(root)
        self._made: dict[tuple, Path] = {}

    def copy_into(self, pipeline, dest: str) -> None:
        """Copy the empty lake of `pipeline`'s layout into `dest` (a lake root that may
        already hold landing files), making that empty lake first if this is the
        layout's first use; `pipeline` then knows its tables are current."""
        from infra.lake import Lake
        from jobs.pipeline import Pipeline

        key = (tuple(sorted(s.name for s in pipeline.streams)), pipeline.settings.bronze_tables)
        if key not in self._made:
            made = self.root / f"layout-{len(self._made)}"
            shutil.rmtree(made, ignore_errors=True)
            Pipeline(self.spark, Lake(str(made)), pipeline.settings,
                     streams=pipeline.streams).ensure_tables()
            self._made[key] = made
        shutil.copytree(self._made[key], dest, dirs_exist_ok=True)
        pipeline.tables_current = True


@dataclass(frozen=True)
class PreparedReplay:
    """A recording's lake after its agents and its pipeline ran: ready to be scored."""
    rec: Recording
    config: object
    lake_root: str


def prepare_replay(spark, config, rec: Recording, root: Path,
                   empty_lakes: EmptyLakes | None = None) -> PreparedReplay:
    """A fresh lake at `root` from the recording: the landing streams copied, the recorded
    broker files through the real agents, every pipeline query the detectors read from run
    once over it. With `empty_lakes`, the lake starts as a copy of an empty one of the
    same layout. Pipelines of one Spark session must not run at once (their queries share
    names): prepare one recording at a time."""
    from infra.lake import Lake
    from jobs.pipeline import Pipeline

    shutil.rmtree(root, ignore_errors=True)
    config = replay_config(config, rec, root)
    lake = Lake(config.storage_root)
    for stream_dir in sorted((rec.path / "landing").iterdir()):
        if stream_dir.name in FROM_RAW:
            continue
        if stream_dir.name == "broker_metrics":
            copy_detector_metrics(stream_dir, Path(lake.landing(stream_dir.name)))
        else:
            shutil.copytree(stream_dir, Path(lake.landing(stream_dir.name)))
    pipeline = Pipeline(spark, lake, config.pipeline, reader_tables=False)
    if empty_lakes is not None:
        empty_lakes.copy_into(pipeline, lake.root)
    run_file_agents(config, lake, rec, root)
    pipeline.process_available()
    return PreparedReplay(rec, config, lake.root)


def copy_detector_metrics(src: Path, dest: Path) -> int:
    """The recorded broker_metrics lines of the series a detector reads
    (evaluation.inputs.DETECTOR_METRICS) into `dest`; returns how many. Two thirds of a
    recording's JMX samples are the request-time histograms only dashboards read: they
    cost the replay's pipeline and cache without changing a score, and the replay's lake
    refuses a read of a series left out (FrozenLake.metrics)."""
    from evaluation.inputs import DETECTOR_METRICS

    dest.mkdir(parents=True, exist_ok=True)
    kept = 0
    for f in sorted(src.glob("*.jsonl.gz")):
        with gzip.open(f, "rb") as lines, gzip.open(dest / f.name, "wb", compresslevel=1) as out:
            for line in lines:
                try:
                    keep = json.loads(line).get("metric") in DETECTOR_METRICS
                except ValueError:
                    keep = True           # the pipeline quarantines it, as live
                if keep:
                    out.write(line)
                    kept += 1
    return kept


INPUTS_FILE = "detector-inputs.pkl.gz"


def inputs_fingerprint() -> str:
    """The shape of what the detectors take: every input type's name and fields. Kept
    inputs read by a read side of another shape are not run again."""
    import dataclasses
    import hashlib

    from evaluation.inputs import DetectorInputs

    parts = []
    for f in dataclasses.fields(DetectorInputs):
        parts.append(f.name)
        item = typing_args(DetectorInputs, f.name)
        if item is not None and dataclasses.is_dataclass(item):
            parts.append(f"{item.__module__}.{item.__qualname__}(" + ",".join(
                x.name for x in dataclasses.fields(item)) + ")")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def typing_args(cls, field_name: str):
    """The item type of `cls`'s list field `field_name` (None when not a list of one)."""
    import typing

    hint = typing.get_type_hints(cls).get(field_name)
    args = typing.get_args(hint)
    return args[0] if typing.get_origin(hint) is list and len(args) == 1 else None


def score_evaluations(rec: Recording, evaluations) -> tuple[ScenarioScore, list[tuple[int, dict]]]:
    """A recording's score from its evaluations ((time, the findings handed over) in
    order): each finding first handed over open counts at that time, in its latest state."""
    from core.findings import Status
    from demo.outcomes import remember_state

    start = rec.manifest["start_ms"]
    first: dict[str, int] = {}
    latest: dict[str, dict] = {}
    states: dict[str, list] = {}      # every (severity, cause) handed over while open
    for t, findings in evaluations:
        for f in findings:
            latest[f.finding_id] = finding_dict(f)
            if f.status is Status.OPEN:
                first.setdefault(f.finding_id, t)
                remember_state(states.setdefault(f.finding_id, []), f)
    # Commits are kept from STATE_HISTORY_S before the recording (a rewind needs the commit
    # before it): a rewind of an earlier scenario in that history is found again here, but
    # live it was handed over during that scenario. What happened before the recording is
    # not this scenario's.
    seen = sorted(((t, {**latest[fid], "states": states_json(states[fid])})
                   for fid, t in first.items()
                   if latest[fid]["first_seen_ms"] >= start), key=lambda x: x[0])
    return score(rec.truth, seen), seen


def evaluation_times(rec: Recording, step_s: float) -> list[int]:
    start, end = rec.manifest["start_ms"], rec.manifest["end_ms"]
    step = int(step_s * 1000)
    return list(range(start + step, end, step)) + [end]


def score_replay(spark, prepared: PreparedReplay, step_s: float, keep_inputs: bool = False
                 ) -> tuple[ScenarioScore, list[tuple[int, dict]]]:
    """The detectors evaluated every `step_s` of the recorded time over a prepared lake;
    its score and what was seen ((first handed over at, finding in its latest state)).
    With `keep_inputs`, what each evaluation read is kept beside the lake (INPUTS_FILE),
    for `rescore`. Safe beside the preparation of another recording in the same session."""
    from detectors.compaction_lag import CompactedTopicConfig
    from evaluation.detect import DETECT_POOL, assess
    from evaluation.inputs import DETECTOR_METRICS, BaselineCache, WindowReadCache
    from evaluation.inputs.tables import FrozenLake
    from infra.lake_sql import LakeSql

    rec, config = prepared.rec, prepared.config
    topic_configs = [CompactedTopicConfig(**c) for c in rec.manifest.get("topic_configs", [])]
    kept: list = []
    # As the live detector query evaluates: each evaluation starts from the last one's
    # findings, its slow-broker baselines and its window reads (the older windows from
    # the last ones), in the detector's own scheduler pool; what it hands over counts
    # (the live query writes gold.anomalies after handing over, and nothing here reads
    # the table back).
    baselines, windows, carried = BaselineCache(), WindowReadCache(), {}
    # Nothing writes the lake from here on; it holds only the detectors' broker metrics.
    frozen = FrozenLake(prepared.lake_root, metrics=DETECTOR_METRICS)
    sql = LakeSql(frozen, refresh_s=math.inf)   # the tables' snapshots loaded once
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", DETECT_POOL)

    def evaluations():
        previous: list = []
        for t in evaluation_times(rec, step_s):
            previous = assess(spark, frozen, config, t, topic_configs=topic_configs,
                              previous=previous, baseline_cache=baselines,
                              window_cache=windows, sql=sql, carried=carried,
                              on_inputs=(lambda now, i: kept.append((now, i)))
                              if keep_inputs else None).findings
            yield t, previous

    try:
        result = score_evaluations(rec, evaluations())
    finally:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)
        sql.close()
        forget_lake(spark, prepared.lake_root)
    if keep_inputs:
        keep_evaluations(Path(prepared.lake_root).parent, kept, step_s)
    return result


def keep_evaluations(folder: Path, evaluations: list, step_s: float | None) -> Path:
    """What evaluations read ((time, DetectorInputs) in order) into folder/INPUTS_FILE,
    for `rescore`; step_s None: a live run's, evaluated when its detector query ran."""
    import pickle

    path = folder / INPUTS_FILE
    with gzip.open(path, "wb") as f:
        pickle.dump({"fingerprint": inputs_fingerprint(), "step_s": step_s,
                     "evaluations": evaluations}, f, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def rescore(config, rec: Recording, root: Path) -> tuple[ScenarioScore, list[tuple[int, dict]]]:
    """The detectors run again, without Spark, over the inputs the last `replay` of `rec`
    kept under root/<scenario>/: every rule, the findings' lifecycle and correlation as a
    replay runs them (not the slow requests attached as evidence, which no score reads).
    Seconds a recording, so a rule change is checked on the whole corpus before a replay.
    A recording of a failed live scenario holds what its live evaluations read, with the
    data as it had arrived then: rescored over those, a live race comes back.
    ValueError when there are no kept inputs or the read side has changed shape since."""
    import pickle

    from detectors.registry import run_detectors
    from evaluation.detect import carried_findings, next_findings

    path = rec.path / INPUTS_FILE
    if not path.exists():
        path = root / rec.scenario / INPUTS_FILE
    if not path.exists():
        raise ValueError(f"no kept detector inputs at {path}: run `kmon matrix replay` first")
    with gzip.open(path, "rb") as f:
        kept = pickle.load(f)
    if kept.get("fingerprint") != inputs_fingerprint():
        raise ValueError(f"{path} was read by a read side of another shape: run `kmon matrix "
                         f"replay` again")
    config = replay_config(config, rec, root / rec.scenario)

    def evaluations():
        previous: list = []
        carried: dict = {}   # as the replay carried it (the inputs keep their identities)
        for t, inputs in kept["evaluations"]:
            previous = next_findings(carried_findings(previous, t, config),
                                     run_detectors(inputs, config, t, carried=carried),
                                     config, t)
            yield t, previous

    return score_evaluations(rec, evaluations())


def replay_all(spark, config, recs: list[Recording], root: Path, step_s: float,
               empty_lakes: EmptyLakes | None = None, keep_inputs: bool = False,
               ) -> Iterator[tuple[Recording, tuple[ScenarioScore, list] | Exception]]:
    """Every recording, in order, with its score and what was seen (`score_replay`), or the
    exception its replay raised (the others still run). The next recording is prepared (agents, pipeline) in a second thread while this one is scored:
    scoring is many small Spark jobs with the driver busy between them, preparing is
    Python agents then a few large jobs, so overlapped in one session (fair scheduling)
    they keep both cores busy. Each replay's lake is at root/<scenario>, and with
    `keep_inputs` what its evaluations read beside it (`rescore`)."""
    if not recs:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay-prepare") as ahead:
        def prepare(rec: Recording) -> Future:
            return ahead.submit(prepare_replay, spark, config, rec, root / rec.scenario,
                                empty_lakes)

        pending: Future | None = prepare(recs[0])
        for i, rec in enumerate(recs):
            this, pending = pending, (prepare(recs[i + 1]) if i + 1 < len(recs) else None)
            try:
                outcome: tuple | Exception = score_replay(spark, this.result(), step_s,
                                                          keep_inputs=keep_inputs)
            except Exception as e:  # noqa: BLE001 - reported with its recording
                outcome = e
            yield rec, outcome


def forget_lake(spark, lake_root: str) -> None:
    """Drop what the JVM keeps of a replay's lake once it is scored: Delta's snapshot of
    every table of it (Delta keeps one per table path, and every replay's lake is at a
    new path). Without this, CI's
    one Spark session ran out of its 2 GB heap at the 22nd of 24 replays. Only this lake's
    paths: another recording may be in preparation beside it."""
    jvm = spark._jvm
    for log_dir in sorted(Path(lake_root).glob("**/_delta_log")):
        jvm.org.apache.spark.sql.delta.DeltaLog.invalidateCache(
            spark._jsparkSession, jvm.org.apache.hadoop.fs.Path(str(log_dir.parent)))


def run_file_agents(config, lake, rec: Recording, root: Path) -> int:
    """The recorded broker files through the real request-log and broker-log agents into
    the lake's landing folder; returns the lines they handled."""
    from prometheus_client import CollectorRegistry

    from ingest.broker_log_agent import IDLE_FLUSH_S
    from ingest.supervisor import BrokerHost, build_agents
    from kmon.monitor import request_windows, sink_factory

    hosts = []
    for node_dir in sorted((rec.path / "raw").glob("node-*")):
        logs = root / "raw" / node_dir.name
        logs.mkdir(parents=True, exist_ok=True)
        for name in (REQUEST_LOG, *BROKER_LOG_FILES):
            packed = node_dir / f"{name}.xz"
            (logs / name).write_bytes(lzma.decompress(packed.read_bytes())
                                      if packed.exists() else b"")
        hosts.append(BrokerHost(int(node_dir.name.split("-")[1]), logs / REQUEST_LOG, logs))
    skipped = [0.0]          # seconds the agents' clock is ahead of the wall clock

    def clock() -> float:
        return time.time() + skipped[0]

    agents = [s.agent for s in build_agents(
        cluster_name=config.watch.cluster, hosts=hosts, offsets_client=None,
        sink_for=sink_factory(config, lake), state_dir=root / "agent-state",
        registry=CollectorRegistry(), clock=clock, request_windows=request_windows(config))]
    handled = 0
    try:
        for agent in agents:
            while (n := agent.poll_once()) > 0:
                handled += n
        # A broker-log event is complete when the next stamped line comes or its file has
        # been quiet for the agent's idle flush time: the agents' clock moves past that
        # (nothing more comes), then one more pass.
        skipped[0] += IDLE_FLUSH_S + 0.1
        for agent in agents:
            handled += agent.poll_once()
            agent.finish()     # the request-log windows still open
    finally:
        for agent in agents:
            agent.close()
    return handled
