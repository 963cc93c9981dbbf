"""alerts/: the rules and the Alertmanager config pass the real promtool and amtool, and
every alert is complete (an anomaly type each, a runbook section, promtool tests that make
it fire and keep it silent).

The binaries come from the Debian packages prometheus and prometheus-alertmanager, which
./kmonw installs; a test that needs one skips, saying which, only where it is missing.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from core.findings import AnomalyType
from tests.support.prom_tools import (
    ALERTMANAGER_FILE,
    ALERTS_DIR,
    AMTOOL_BINARIES,
    PROMTOOL_BINARIES,
    RULES_FILE,
    alertmanager_config,
    find_binary,
)

REPO = ALERTS_DIR.parent
RUNBOOK = REPO / "docs" / "runbook.md"
TEST_FILES = sorted((ALERTS_DIR / "tests").glob("*.yml"))


def _binary(names: tuple[str, ...]) -> str:
    path = find_binary(names)
    if path is None:
        pytest.skip(f"{names[0]} is not installed (Debian package "
                    f"{'prometheus' if names[0] == 'promtool' else 'prometheus-alertmanager'}; "
                    f"./kmonw setup installs it when run as root)")
    return path


def _run(*cmd: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


def _alerts() -> list[dict]:
    rules = yaml.safe_load(RULES_FILE.read_text())
    return [r for g in rules["groups"] for r in g["rules"] if "alert" in r]


# --- the real tools ----------------------------------------------------------------------

def test_promtool_check_rules():
    res = _run(_binary(PROMTOOL_BINARIES), "check", "rules", str(RULES_FILE))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in res.stdout


def test_promtool_unit_tests_pass():
    assert TEST_FILES, "no promtool test files in alerts/tests/"
    res = _run(_binary(PROMTOOL_BINARIES), "test", "rules", *map(str, TEST_FILES))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAILED" not in res.stdout


def test_amtool_check_config_of_the_shipped_file():
    res = _run(_binary(AMTOOL_BINARIES), "check-config", str(ALERTMANAGER_FILE))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_amtool_check_config_of_a_rendered_file(tmp_path):
    rendered = tmp_path / "alertmanager.yml"
    rendered.write_text(alertmanager_config(
        {"page": "https://pager.example.com/hook", "ticket": "https://tickets.example.com/hook"},
        route_timers={"group_wait": "1s"}))
    res = _run(_binary(AMTOOL_BINARIES), "check-config", str(rendered))
    assert res.returncode == 0, res.stdout + res.stderr
    cfg = yaml.safe_load(rendered.read_text())
    urls = {r["name"]: r["webhook_configs"][0]["url"] for r in cfg["receivers"]}
    assert urls == {"page": "https://pager.example.com/hook",
                    "ticket": "https://tickets.example.com/hook"}


@pytest.mark.parametrize("labels, receiver", [
    (["severity=page", "alertname=KmonUncleanLeaderElection"], "page"),
    (["severity=ticket", "alertname=KmonCompactionLag"], "ticket"),
    (["alertname=SomethingUnlabelled"], "ticket"),
])
def test_amtool_routes_by_severity(labels, receiver):
    res = _run(_binary(AMTOOL_BINARIES), "config", "routes", "test",
               f"--config.file={ALERTMANAGER_FILE}", f"--verify.receivers={receiver}", *labels)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == receiver


# --- completeness (pure checks over the files) -------------------------------------------

def test_one_alert_per_anomaly_type():
    by_type: dict[str, list[str]] = {}
    for a in _alerts():
        m = re.search(r'kmon_findings_open\{type="([a-z_]+)"', a["expr"])
        if m:
            by_type.setdefault(m.group(1), []).append(a["alert"])
    assert {t: len(names) for t, names in by_type.items()} == {t.value: 1 for t in AnomalyType}


def test_every_alert_has_severity_summary_description_and_runbook():
    for a in _alerts():
        assert a.get("labels", {}).get("severity"), a["alert"]
        ann = a.get("annotations", {})
        assert ann.get("summary") and ann.get("description"), a["alert"]
        assert ann.get("runbook_url") == f"docs/runbook.md#{a['alert'].lower()}", a["alert"]


def _github_anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_runbook_url_points_at_a_runbook_section():
    anchors = {_github_anchor(line[3:]) for line in RUNBOOK.read_text().splitlines()
               if line.startswith("## ")}
    missing = [a["alert"] for a in _alerts()
               if a["annotations"]["runbook_url"].split("#", 1)[1] not in anchors]
    assert not missing, f"no runbook section for {missing}"


def test_every_alert_has_a_firing_and_a_silent_promtool_case():
    fires, silent = set(), set()
    for path in TEST_FILES:
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group.get("alert_rule_test", []):
                (fires if case.get("exp_alerts") else silent).add(case["alertname"])
    names = {a["alert"] for a in _alerts()}
    assert names - fires == set(), "alerts never tested firing"
    assert names - silent == set(), "alerts never tested silent"


def test_inhibit_rules_name_real_alerts():
    names = {a["alert"] for a in _alerts()}
    cfg = yaml.safe_load(ALERTMANAGER_FILE.read_text())
    for rule in cfg["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            m = re.fullmatch(r'alertname(=~?)"(.+)"', matcher)
            if not m:
                continue
            alternatives = m.group(2).split("|") if m.group(1) == "=~" else [m.group(2)]
            assert set(alternatives) <= names, matcher
