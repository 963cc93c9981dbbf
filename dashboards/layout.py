"""A kmon dashboard under construction: shared settings, rows, panel ids, JSON output.

Wraps the SDK's dashboard builder so each dashboard module only says what it shows:
`KmonDashboard(uid, title, description)`, then `row(...)` and `add(...)` in reading order.
Panel ids are numbered in that order (Grafana wants them unique within a dashboard, and
stable ids keep the generated JSON stable), and the SDK places panels left to right, top
to bottom, 24 columns wide.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

from dashboards.variables import standard_variables

TAG = "kmon"


class KmonDashboard:
    def __init__(self, uid: str, title: str, description: str, *, single_broker: bool = False,
                 extra_variables: list | None = None):
        self.uid = uid
        self._next_id = 1
        self._builder = (
            db.Dashboard(title).uid(uid).description(description).tags([TAG])
            .time("now-1h", "now").refresh("30s").timezone("browser").readonly()
            .tooltip(dm.DashboardCursorSync.CROSSHAIR)
            .link(db.DashboardLink("kmon dashboards").type(dm.DashboardLinkType.DASHBOARDS)
                  .tags([TAG]).as_dropdown(True).include_vars(True).keep_time(True)))
        for variable in [*standard_variables(single_broker=single_broker),
                         *(extra_variables or [])]:
            self._builder = self._builder.with_variable(variable)

    def _take_id(self) -> int:
        pid, self._next_id = self._next_id, self._next_id + 1
        return pid

    def row(self, title: str) -> "KmonDashboard":
        self._builder = self._builder.with_row(db.Row(title).id(self._take_id()))
        return self

    def add(self, *panels) -> "KmonDashboard":
        for panel in panels:
            self._builder = self._builder.with_panel(panel.id(self._take_id()))
        return self

    def to_json(self) -> dict[str, Any]:
        """The dashboard's JSON model, as Grafana's file provisioning and HTTP API take it."""
        return json.loads(json.dumps(self._builder.build(), cls=JSONEncoder))
