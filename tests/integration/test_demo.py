"""`kmon demo --short`: the real cluster, the four real faults, the summary.

This is also the detectors' acceptance on a real cluster (issue 4): every fault is caused
for real (demo/faults/), nothing is written as synthetic rows, and the test reads what the
pipeline and the detectors made of it: the demo's summary (JSON beside the printed table)
and gold.anomalies. Run alone (`./kmonw test -m demo`), or first in a full session
(tests/conftest.py), before any other cluster or Spark session exists: it is the test
most sensitive to load.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kmon.config import REPO_ROOT
from tests.integration.console_checks import check_live_console

DEMO_TIMEOUT_S = 2400
# The healthy run must be as long as the faulty one (issue 4: "a healthy run of the same
# length with normal load: no findings at all"): the four faults took 376 s in the run of
# 2026-11-25 12:46 (faster than before: queries interpreted, no forks per file).
HEALTHY_S = 390
# Not in the default run (pyproject addopts): 15-25 minutes on 2 cores would take CI past
# its 30 minutes. Run it with `./kmonw test -m demo`.
pytestmark = [pytest.mark.demo, pytest.mark.timeout(DEMO_TIMEOUT_S + 120)]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("demo")
    summary = out_dir / "summary.json"
    env = {**os.environ, "KMON__KMON__WORK_DIR": str(REPO_ROOT / ".kmon")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "demo", "--short", "--warmup", str(HEALTHY_S),
         "--exporter-port", "0", "--summary-json", str(summary)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=DEMO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        text, _ = proc.communicate()
        pytest.fail("kmon demo --short did not finish in time:\n" + text[-6000:])
    (out_dir / "demo.log").write_text(text)
    print(text[-12000:])
    return proc.returncode, text, json.loads(summary.read_text()) if summary.exists() else None


def test_the_console_is_for_people(demo):
    """Steps, progress, findings and the summary; the log records in the file it names;
    no line repeated more than three times (a warning per second used to be)."""
    _rc, text, _summary = demo
    check_live_console(text, REPO_ROOT)


def by_fault(summary) -> dict:
    return {f["fault"]: f for f in summary["faults"]}


def test_every_fault_is_detected_and_the_summary_says_how_fast(demo):
    code, text, summary = demo
    assert summary is not None, text[-6000:]
    faults = by_fault(summary)
    assert set(faults) == {"slow_broker", "offset_rewind", "compaction_lag", "unclean_election"}
    missed = [name for name, f in faults.items() if not f["detected"]]
    assert not missed, f"not detected: {missed}\n{text[-6000:]}"
    for name, f in faults.items():
        if f["detected"]:
            assert f["time_to_detect_s"] is not None and f["time_to_detect_s"] > 0, name
    # The printed table: one row per fault with its time.
    for title in ("slow broker", "offset rewinds", "compaction lag", "unclean leader election"):
        assert re.search(rf"\| {re.escape(title)}[^|]*\| yes\s+\| \d+ s ", text), title
    assert "incident report:" in text and summary["report"].endswith(".html")
    assert Path(summary["report"]).read_text().count("<svg") >= 1


def test_compaction_lag_is_detected(demo):
    """The throttled cleaner falls behind: a compaction_lag finding, and the demo exits 0."""
    code, text, summary = demo
    f = by_fault(summary)["compaction_lag"]
    assert f["detected"], f"compaction lag not detected: {f['notes'].get('error', 'timed out')}"
    assert f["findings"][0]["type"] == "compaction_lag"
    assert code == 0, text[-3000:]


def test_a_healthy_run_raises_nothing(demo):
    _, text, summary = demo
    assert summary["healthy_findings"] == [], summary["healthy_findings"]
    assert f"healthy warm-up ({HEALTHY_S} s)" in text
    assert summary["healthy_s"] >= HEALTHY_S, summary["healthy_s"]


def test_the_slow_broker_is_named_with_its_stage(demo):
    _, _, summary = demo
    f = by_fault(summary)["slow_broker"]
    (first,) = [x for x in f["findings"] if x["entity"] == "broker:2"][:1]
    assert first["type"] == "slow_broker"
    assert first["cause"], first            # the stage's meaning (or slow_follower)
    assert first["evidence"], first


def test_both_rewinds_have_a_cause_and_a_size(demo):
    _, _, summary = demo
    f = by_fault(summary)["offset_rewind"]
    groups = {x["entity"].removeprefix("group:").rsplit("/", 1)[0]: x for x in f["findings"]}
    assert set(groups) == {"billing", "analytics"}
    assert groups["billing"]["cause"] == "operator_reset", groups["billing"]
    assert groups["analytics"]["cause"] not in ("operator_reset", "unknown"), groups["analytics"]
    for x in groups.values():
        ev = x["evidence"]
        assert ev["old_position"] > ev["new_position"], x
        assert ev["duplicates"] > 0, x       # the size: messages read again


def test_the_unclean_election_is_one_incident_with_its_effects(demo):
    _, _, summary = demo
    f = by_fault(summary)["unclean_election"]
    (election,) = [x for x in f["findings"] if x["type"] == "unclean_election"][:1]
    assert election["entity"] == "ledger-0"
    ev = election["evidence"]
    assert ev["new_leader"] == 2 and ev["lost_from"] is not None, election
    assert ev["messages_lost"] and ev["messages_lost"] > 0, election
    groups = {g["group"] if isinstance(g, dict) else g
              for key in ("groups_inside", "groups_beyond", "groups_behind", "groups_unplaced")
              for g in ev[key]}
    assert "ledger-readers" in groups, election
    related = [line for line in f["notes"]["all_findings"] if "ledger" in line]
    incident = election["incident_id"]
    assert incident, election
    linked = [line for line in related if incident[:12] in line]
    assert any("offset_reset" in line or "offset_rewind" in line or "log_truncation" in line
               for line in linked), related
