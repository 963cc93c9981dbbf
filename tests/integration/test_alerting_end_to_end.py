"""Findings to a pager, through the real chain: kmon exporter -> Prometheus (kmon-rules.yml)
-> Alertmanager (alertmanager.yml) -> a webhook served by the test.

The findings are set on the exporter directly, so that grouping by incident, routing by
severity, inhibition and resolution can each be made to happen; a finding caused on the
real cluster and carried by the running `kmon run` to the webhook is
test_oncall_end_to_end.py's.

The shipped files are used as they are, except for two test-only rewrites through
tests.support.prom_tools: every alert's `for:` becomes 0s (promtool tests the shipped durations)
and Alertmanager's group timers become 1s; its webhook URLs point at the test's server.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from core.findings import ActionKind, AnomalyType, EntityKind, Finding, Severity, Status
from kmon.exporter import KmonExporter
from tests.conftest import wait_until
from tests.support.prom_tools import (
    ALERTMANAGER_BINARIES,
    PROMETHEUS_BINARIES,
    RULES_FILE,
    alertmanager_config,
    find_binary,
    prometheus_config,
    rules_with_for,
    start_alertmanager,
    start_prometheus,
)
from tests.support.webhook_receiver import WebhookReceiver

T0 = 1_780_000_000_000


def _finding(fid: str, cluster: str, type_: AnomalyType, severity: Severity, kind: EntityKind,
             entity: str, cause: str, action: ActionKind, incident: str | None = None,
             evidence: dict | None = None) -> Finding:
    return Finding(finding_id=fid, cluster=cluster, type=type_, severity=severity,
                   entity_kind=kind, entity=entity, first_seen_ms=T0, last_seen_ms=T0,
                   status=Status.OPEN, evidence=evidence or {}, cause=cause, explanation="",
                   suggested_action=action, incident_id=incident)


# One incident in prod-eu: the election (root), the truncation it caused, and a consumer
# rewind the election inhibits.
ELECTION = _finding("f-elect", "prod-eu", AnomalyType.UNCLEAN_ELECTION, Severity.CRITICAL,
                    EntityKind.PARTITION, "orders-2", "unclean_leader_election",
                    ActionKind.PAGE_HUMAN, incident="f-elect",
                    evidence={"topic": "orders", "partition": 2, "lost_from": 1200,
                              "lost_until": 1350})
TRUNCATION = _finding("f-trunc", "prod-eu", AnomalyType.LOG_TRUNCATION, Severity.HIGH,
                      EntityKind.PARTITION, "orders-2", "truncated_below_high_watermark",
                      ActionKind.PAGE_HUMAN, incident="f-elect")
REWIND = _finding("f-rewind", "prod-eu", AnomalyType.OFFSET_REWIND, Severity.HIGH,
                  EntityKind.GROUP, "group:billing/orders-2", "auto_reset_after_out_of_range",
                  ActionKind.RESTORE_GROUP_OFFSETS, incident="f-elect")
# prod-us: cluster-wide slowness inhibits the per-broker alert; a warning goes to tickets.
WIDE = _finding("f-wide", "prod-us", AnomalyType.CLUSTER_WIDE_SLOWNESS, Severity.HIGH,
                EntityKind.CLUSTER, "cluster:prod-us", "cluster_wide_slowness",
                ActionKind.PAGE_HUMAN)
SLOW = _finding("f-slow", "prod-us", AnomalyType.SLOW_BROKER, Severity.HIGH, EntityKind.BROKER,
                "broker:4", "local_disk_or_page_cache", ActionKind.MOVE_LEADERSHIP)
CLEANER = _finding("f-clean", "prod-us", AnomalyType.COMPACTION_LAG, Severity.WARNING,
                   EntityKind.BROKER, "broker:5", "cleaner_falling_behind",
                   ActionKind.PAGE_HUMAN)


def _names(notification: dict, status: str = "firing") -> set[str]:
    return {a["labels"]["alertname"] for a in notification["alerts"] if a["status"] == status}


def _group_of(notification: dict) -> dict:
    return notification["groupLabels"]


def _wait(predicate, what: str, hook: WebhookReceiver, *procs):
    """wait_until, failing with what the webhook got and the processes' last log lines."""
    try:
        return wait_until(predicate, timeout=120, what=what)
    except AssertionError as e:
        got = [(p, _group_of(n), sorted(_names(n))) for p, n in hook.notifications]
        logs = "\n".join(f"--- {p.name} log:\n{p.log_tail()}" for p in procs if p is not None)
        raise AssertionError(f"{e}\nnotifications so far: {got}\n{logs}") from None


def test_findings_page_through_prometheus_and_alertmanager(tmp_path):
    for names in (PROMETHEUS_BINARIES, ALERTMANAGER_BINARIES):
        if find_binary(names) is None:
            pytest.skip(f"{names[0]} is not installed (Debian packages prometheus and "
                        f"prometheus-alertmanager; ./kmonw setup installs them as root)")

    exporter = KmonExporter(CollectorRegistry())
    # The inhibited findings (REWIND, SLOW) come later, once their inhibitors are active in
    # Alertmanager: an inhibition only holds back what arrives while its source fires.
    exporter.set_findings([ELECTION, TRUNCATION, WIDE, CLEANER], now_ms=T0)
    hook = WebhookReceiver()
    metrics_server = prom = am = None
    try:
        metrics_server, _ = exporter.serve(0)
        am = start_alertmanager(
            alertmanager_config({"page": hook.url + "/page", "ticket": hook.url + "/ticket"},
                                route_timers={"group_wait": "1s", "group_interval": "1s",
                                              "repeat_interval": "1h"}),
            tmp_path / "alertmanager")
        prom = start_prometheus(
            prometheus_config(
                scrape_targets={"kmon": [f"127.0.0.1:{metrics_server.server_port}"]},
                rule_files=["kmon-rules.yml"], alertmanagers=[f"127.0.0.1:{am.port}"],
                scrape_interval="1s", evaluation_interval="1s"),
            tmp_path / "prometheus",
            files={"kmon-rules.yml": rules_with_for(RULES_FILE.read_text(), "0s")})

        # The election and its truncation: one notification to the pager, grouped by
        # cluster and incident, with the finding's labels.
        incident = _wait(
            lambda: hook.find("/page", lambda n: _group_of(n) == {"cluster": "prod-eu",
                                                                  "incident": "f-elect"}
                              and {"KmonUncleanLeaderElection", "KmonLogTruncation"}
                              <= _names(n)),
            "one page notification holding the election and the truncation", hook, prom, am)
        assert incident["receiver"] == "page"
        election = next(a for a in incident["alerts"]
                        if a["labels"]["alertname"] == "KmonUncleanLeaderElection")
        assert {k: election["labels"][k] for k in
                ("severity", "finding_severity", "cluster", "incident", "entity", "finding",
                 "type", "entity_kind", "cause", "action", "job")} == {
            "severity": "page", "finding_severity": "critical", "cluster": "prod-eu",
            "incident": "f-elect", "entity": "orders-2", "finding": "f-elect",
            "type": "unclean_election", "entity_kind": "partition",
            "cause": "unclean_leader_election", "action": "page_human", "job": "kmon"}
        assert election["annotations"]["runbook_url"] == \
            "docs/runbook.md#kmonuncleanleaderelection"
        assert "orders-2" in election["annotations"]["summary"]

        # Routing by severity: the warning finding goes to the ticket receiver.
        ticket = _wait(
            lambda: hook.find("/ticket", lambda n: "KmonCompactionLag" in _names(n)),
            "the compaction-lag ticket", hook, prom, am)
        assert ticket["receiver"] == "ticket"
        assert ticket["commonLabels"]["severity"] == "ticket"
        assert _group_of(ticket) == {"cluster": "prod-us", "incident": "f-clean"}

        # Inhibition: Alertmanager holds the rewind (election, same incident) and the
        # per-broker slow alert (cluster-wide slowness, same cluster) as suppressed.
        def active(alertname: str):
            alerts = am.get_json(f'/api/v2/alerts?filter=alertname="{alertname}"')
            return alerts and all(a["status"]["state"] == "active" for a in alerts)
        _wait(lambda: active("KmonClusterWideSlowness") and active("KmonUncleanLeaderElection"),
              "the inhibiting alerts active in Alertmanager", hook, prom, am)
        exporter.set_findings([ELECTION, TRUNCATION, REWIND, WIDE, SLOW, CLEANER],
                              now_ms=T0 + 60_000)

        def suppressed(alertname: str):
            alerts = am.get_json(f'/api/v2/alerts?filter=alertname="{alertname}"')
            return alerts and all(a["status"]["state"] == "suppressed"
                                  and a["status"]["inhibitedBy"] for a in alerts)
        _wait(lambda: suppressed("KmonConsumerOffsetRewind"),
              "the rewind inhibited by the election", hook, prom, am)
        _wait(lambda: suppressed("KmonSlowBroker"),
              "the slow broker inhibited by cluster-wide slowness", hook, prom, am)
        _wait(lambda: hook.find("/page", lambda n: "KmonClusterWideSlowness" in _names(n)),
              "the cluster-wide slowness page", hook, prom, am)
        for _, n in hook.notifications:
            assert not {"KmonConsumerOffsetRewind", "KmonSlowBroker"} & _names(n), n

        # Resolution: once the incident's findings resolve, the pager hears so. (A scrape
        # may land between two rules' evaluations, so the two can resolve in successive
        # notifications of the group.)
        exporter.set_findings([WIDE, SLOW, CLEANER], now_ms=T0 + 3_600_000)

        def resolved_in_incident() -> set[str]:
            return {name for p, n in list(hook.notifications)
                    if p == "/page" and _group_of(n).get("incident") == "f-elect"
                    for name in _names(n, "resolved")}
        _wait(lambda: {"KmonUncleanLeaderElection", "KmonLogTruncation"}
              <= resolved_in_incident(), "the incident's resolved notifications", hook, prom, am)
    finally:
        for proc in (prom, am):
            if proc is not None:
                proc.stop()
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
        hook.stop()
