"""1,000 malformed request log lines of varied kinds, fed through the real agent into the
running pipeline: every one lands in silver.quarantine with its reason, and the pipeline
keeps running (valid lines written after them still reach silver: the broker is one of the
agent's `full_brokers`, so each also goes out whole to request_stages)."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

from prometheus_client import CollectorRegistry

from infra.lake import Lake
from ingest.agent_metrics import AgentMetrics
from ingest.file_tailer import PositionStore
from ingest.request_log import MAX_LINE_CHARS
from ingest.request_log_agent import RequestLogAgent, RequestLogSource, WindowSettings
from ingest.sinks import LandingSink
from jobs.pipeline import Pipeline
from jobs.streams import QUARANTINE, stream
from tests.conftest import wait_until

FIXTURE = Path(__file__).parent.parent / "fixtures" / "request_log" / "kafka-4.3.1-request.log"
PREFIX = "[2026-11-22 10:38:33,638] DEBUG Completed request:"
SUFFIX = " (kafka.request.logger)"


def _line(body: dict) -> bytes:
    """A request log line as the broker writes it: compact JSON, then the logger name."""
    return (PREFIX + json.dumps(body, separators=(",", ":")) + SUFFIX).encode()


def _good_body() -> dict:
    for line in FIXTURE.read_text().splitlines():
        if '"requestApiKey":0' in line:
            # "[%d] %p %m (%c)": the JSON object, then the logger name
            return json.JSONDecoder().raw_decode(line, line.index("request:") + 8)[0]
    raise AssertionError("no Produce line in the fixture")


def _bad_lines(n: int, rng: random.Random) -> list[tuple[str, bytes]]:
    """(kind, line) pairs; each kind is a different way a line can be broken."""
    body = _good_body()
    text = json.dumps(body, separators=(",", ":"))

    def with_(**changes) -> bytes:
        b = json.loads(text)
        for k, v in changes.items():
            if k == "api":
                b["requestHeader"]["requestApiKey"] = v
                b["requestHeader"].pop("requestApiKeyName", None)
            else:
                b[k] = v
        return _line(b)

    makers = {
        "truncated_json": lambda: (PREFIX + text[: rng.randint(5, len(text) - 5)]).encode(),
        "wrong_type": lambda: with_(totalTimeMs=rng.choice(["slow", [1], {"a": 1}, True])),
        "unknown_api": lambda: with_(api=rng.randint(5000, 30000)),
        "negative_time": lambda: with_(localTimeMs=-rng.uniform(0.1, 100)),
        "garbage_bytes": lambda: bytes(rng.randrange(128, 256) for _ in range(rng.randint(1, 200))),
        "oversize_line": lambda: (PREFIX + '{"x":"' + "a" * (MAX_LINE_CHARS + 10) + '"}').encode(),
        "not_a_request_line": lambda: b"[2026-11-22 10:38:33,638] INFO something else entirely",
        "missing_field": lambda: _line({k: v for k, v in body.items() if k != "requestHeader"}),
    }
    kinds = list(makers)
    out = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        if kind == "oversize_line" and i >= len(kinds) * 3:  # a few 8 MB lines are enough
            kind = "truncated_json"
        out.append((kind, makers[kind]()))
    return out


def test_a_thousand_malformed_lines_are_quarantined_and_the_pipeline_keeps_running(
        spark, kmon_config, tmp_path):
    rng = random.Random(7)
    lake = Lake(str(tmp_path / "lake"))
    log = tmp_path / "kafka-request.log"
    bad = _bad_lines(1000, rng)
    good = _line(_good_body())
    with open(log, "wb") as f:
        for _, line in bad:
            f.write(line + b"\n")
    registry = CollectorRegistry()
    agent = RequestLogAgent([RequestLogSource("m", 7, log)], LandingSink(lake.landing_root, "t"),
                            PositionStore(tmp_path / "pos.json"), AgentMetrics(registry, "t"),
                            batch_lines=300, windows=WindowSettings(full_brokers=frozenset({7})))
    fast = kmon_config.with_overrides(pipeline={"silver_trigger_s": 1})
    pipeline = Pipeline(spark, lake, fast.pipeline,
        streams=(stream("request_stages"), stream(QUARANTINE)))
    pipeline.start()
    try:
        while agent.poll_once():
            pass
        q_path = lake.table("silver", QUARANTINE)

        def quarantined():
            pipeline.check()
            return spark.read.format("delta").load(q_path).where("cluster = 'm'").count()

        wait_until(lambda: quarantined() >= 1000, 300, "1,000 quarantined rows")
        with open(log, "ab") as f:
            for _ in range(10):
                f.write(good + b"\n")
        agent.poll_once()

        def silver_rows():
            pipeline.check()
            return spark.read.format("delta").load(
                lake.table("silver", "request_stages")).where("cluster = 'm'").count()

        wait_until(lambda: silver_rows() == 10, 120, "valid lines after the bad ones")
        assert all(q.isActive for q in pipeline.queries)
    finally:
        pipeline.stop()
        agent.close()
    rows = spark.read.format("delta").load(q_path).where("cluster = 'm'").collect()
    assert len(rows) == 1000
    assert len({r["record_id"] for r in rows}) == 1000
    reasons = Counter(r["reason"].split(":")[0] for r in rows)
    # Every kind of damage is named; nothing is quarantined without a reason.
    assert {"truncated_json", "wrong_type", "unknown_api", "negative_time", "not_utf8",
            "oversize_line", "not_request_line", "missing_field"} <= set(reasons), reasons
    assert all(r["raw_bytes_len"] > 0 and r["raw"] for r in rows)
    assert all(len(r["raw"]) <= 16 * 1024 for r in rows)
    assert sum(1 for r in rows if r["raw_truncated"]) >= 3
