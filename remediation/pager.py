"""page_human actions: one alert posted to Alertmanager's API (POST /api/v2/alerts).

Findings already page through Prometheus (kmon_findings_open and alerts/kmon-rules.yml);
this page is the remediation step saying "a human must act on this finding", with the
decision's reason. Its labels follow the rules' conventions so Alertmanager routes and
groups it like the finding alerts: severity="page", cluster, and incident (the finding id,
as the exporter does for a finding linked to nothing). The alert ends after `ttl_s`
unless posted again; Alertmanager de-duplicates an alert posted twice with the same labels.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

ALERT_NAME = "KmonRemediationPage"


class PagerError(RuntimeError):
    """Alertmanager did not accept the alert."""


@dataclass(frozen=True)
class PagePlan:
    alert: Mapping[str, Any]

    def details(self) -> dict[str, Any]:
        return {"alert": dict(self.alert)}

    def describe(self) -> str:
        return (f"post {ALERT_NAME} for finding {self.alert['labels']['finding']} "
                f"({self.alert['labels']['type']} on {self.alert['labels']['entity']})")


def _rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def page_alert(*, cluster: str, action_id: str, operation: Mapping[str, Any], now_ms: int,
               ttl_s: float = 3600.0) -> dict[str, Any]:
    """The Alertmanager v2 alert for a page operation (see decide.page)."""
    labels = {"alertname": ALERT_NAME, "severity": "page", "cluster": cluster,
              "incident": str(operation["finding_id"]), "finding": str(operation["finding_id"]),
              "type": str(operation["type"]), "entity": str(operation["entity"]),
              "cause": str(operation.get("cause", "")), "finding_severity":
              str(operation.get("severity", "")), "action_id": action_id}
    end = now_ms + int(ttl_s * 1000)
    return {"labels": labels,
            "annotations": {"summary": f"kmon remediation: a human must act on "
                                       f"{operation['type']} {operation['entity']}",
                            "description": str(operation.get("summary", ""))},
            "startsAt": _rfc3339(now_ms), "endsAt": _rfc3339(end)}


class AlertmanagerPager:
    def __init__(self, base_url: str, timeout_s: float = 10.0):
        self.url = base_url.rstrip("/") + "/api/v2/alerts"
        self.timeout_s = timeout_s

    def post(self, alert: Mapping[str, Any]) -> None:
        body = json.dumps([alert]).encode()
        req = urllib.request.Request(self.url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                r.read()
        except (urllib.error.URLError, OSError) as e:
            raise PagerError(f"posting to {self.url} failed: {e}") from e
