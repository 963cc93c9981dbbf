"""`kmon demo --capture` and `kmon demo --replay`: a demo run's telemetry, kept small, fed
again through the same pipeline and detectors with no cluster.

The capture keeps every stream's landing files gzipped (the request-log agents' windows
are small: a few hundred rows per broker and hour) and a manifest of the run's time range, its compacted topics' configs
and its faults. The replay copies them into a fresh lake, runs every query once over
them, evaluates the detectors every `REPLAY_STEP_S` captured seconds, and prints the
findings and the same summary as a live demo.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from demo.cause import all_faults
from demo.console import Progress
from demo.outcomes import FaultOutcome, FindingTracker, record_finding
from demo.preflight import DemoError
from demo.settings import demo_config
from demo.summary import summary_table, table_width
from kmon.config import Config

CAPTURE_DIR = Path(__file__).resolve().parent / "capture"
REPLAY_STEP_S = 60.0      # the replay evaluates the detectors every this many captured seconds
REPLAY_ACTION = "(replay: no queue)"   # the action column: no decision step in a replay


def capture(lake_landing: Path, outcomes: list[FaultOutcome], start_ms: int, end_ms: int,
            topic_configs: list[dict], dest: Path = CAPTURE_DIR, out=sys.stdout) -> Path:
    """Keep a demo run's telemetry, every stream's landing files gzipped, for
    `kmon demo --replay`."""
    import gzip

    shutil.rmtree(dest, ignore_errors=True)
    for stream_dir in sorted(p for p in Path(lake_landing).iterdir() if p.is_dir()):
        lines = []
        for f in sorted(stream_dir.glob("*.jsonl")):
            lines += f.read_bytes().splitlines(keepends=True)
        if lines:   # one gzipped file per stream, in the order the agents wrote them
            target = dest / "landing" / stream_dir.name
            target.mkdir(parents=True, exist_ok=True)
            with gzip.open(target / f"{stream_dir.name}-capture.jsonl.gz", "wb",
                           compresslevel=9) as g:
                g.writelines(lines)
    manifest = {"start_ms": start_ms, "end_ms": end_ms, "topic_configs": topic_configs,
                "faults": [{"name": o.name, "started_ms": o.started_ms,
                            "until_ms": o.detected_ms or end_ms} for o in outcomes]}
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2))
    print(f"captured {size_mb(dest):.1f} MB of telemetry in {dest}", file=out)
    return dest


def run_replay(config: Config, *, summary_json: str | None = None, step_s: float | None = None,
               out=sys.stdout) -> int:
    """Captured telemetry of a demo run through the same pipeline and detectors; no cluster."""
    from infra.lake import Lake
    from infra.spark_session import build_spark_session
    from jobs.pipeline import Pipeline

    manifest = load_manifest()
    root = config.work_dir / "demo-replay"
    shutil.rmtree(root, ignore_errors=True)
    # The live demo's settings (its cleaner backoff, its resolve time), so the replay
    # judges the capture by the same rules the run that made it did.
    config = demo_config(config).with_overrides(spark={"storage_root": str(root / "lake")})
    lake = Lake(config.storage_root)
    p = Progress(4, out)
    p.step(f"copying the captured telemetry ({size_mb(CAPTURE_DIR):.1f} MB, "
           f"{len(manifest['faults'])} faults) into a fresh lake")
    for stream_dir in sorted((CAPTURE_DIR / "landing").iterdir()):
        shutil.copytree(stream_dir, Path(lake.landing(stream_dir.name)))
    p.step("starting Spark with Delta; every query once over the captured telemetry")
    spark = build_spark_session(config)
    try:
        Pipeline(spark, lake, config.pipeline).process_available()
        tracker = replay_detectors(spark, lake, config, manifest, step_s or REPLAY_STEP_S, p, out)
        outcomes = replayed_outcomes(manifest, tracker)
        p.step("summary (times are detector time on complete data, not pipeline latency)")
        print("\n" + summary_table(outcomes, table_width()), file=out)
        print(f"\nDelta tables under {config.storage_root}", file=out, flush=True)
        if summary_json:
            Path(summary_json).write_text(json.dumps(
                {"faults": [o.to_json() for o in outcomes], "lake": config.storage_root},
                indent=2, default=str))
        return 0
    finally:
        spark.stop()


def load_manifest() -> dict:
    path = CAPTURE_DIR / "manifest.json"
    if not path.exists():
        raise DemoError(f"no captured telemetry at {CAPTURE_DIR}: run `kmon demo --capture` "
                        f"once (or use the live `kmon demo`)")
    return json.loads(path.read_text())


def replay_detectors(spark, lake, config: Config, manifest: dict, step_s: float, p: Progress,
                     out) -> FindingTracker:
    """The detectors evaluated every `step_s` of the captured time range, as if live: each
    finding is printed and timed at the captured time it first appeared."""
    from detectors.compaction_lag import CompactedTopicConfig
    from evaluation.detect import evaluate

    start, end = manifest["start_ms"], manifest["end_ms"]
    topic_configs = [CompactedTopicConfig(**c) for c in manifest.get("topic_configs", [])]
    times = list(range(start + int(step_s * 1000), end, int(step_s * 1000))) + [end]
    p.step(f"replaying the detectors every {step_s:.0f} s of the captured "
           f"{(end - start) / 60000:.0f} minutes ({len(times)} evaluations)")
    tracker = FindingTracker(out)
    for i, t in enumerate(times, 1):
        tracker.clock = lambda t=t: t
        tracker(evaluate(spark, lake, config, t, topic_configs=topic_configs), t)
        if i % 10 == 0:
            p.note(f"{i}/{len(times)} evaluations, {len(tracker.first_seen)} findings so far")
    return tracker


def replayed_outcomes(manifest: dict, tracker: FindingTracker) -> list[FaultOutcome]:
    """Each captured fault's outcome: a finding counts for the fault in progress, up to
    the next fault's start."""
    faults = {f.name: f for f in all_faults(3)}
    records = manifest["faults"]
    outcomes = []
    for i, rec in enumerate(records):
        fault = faults[rec["name"]]
        o = FaultOutcome(fault.name, fault.title, rec["started_ms"])
        bound = records[i + 1]["started_ms"] if i + 1 < len(records) else manifest["end_ms"]
        for t, f in tracker.since(rec["started_ms"]):
            if t <= bound:
                record_finding(o, fault, t, f)
        o.action = "\n".join(REPLAY_ACTION for _ in o.findings) or REPLAY_ACTION
        outcomes.append(o)
    return outcomes


def size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6
