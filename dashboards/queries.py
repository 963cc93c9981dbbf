"""Every panel's PromQL, with Grafana's template variables filled in, ready for Prometheus.

Grafana substitutes ``$cluster``, ``${broker}``, ``$__rate_interval`` ... before it sends a
query; Prometheus's HTTP API knows none of them. `panel_queries` lists every query of a
dashboard JSON model with the variables replaced (dashboard variables by ``.*``, the
"All" value, unless `values` says otherwise; Grafana's built-ins by fixed intervals), so a
test can send each one to a real Prometheus and check it parses and returns data.
A variable the dashboard does not declare is an error, not a silent ``.*``.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

# Grafana's built-in variables, as a 1 h range at a 1 m step would set them.
BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__interval_ms": "60000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
ALL = ".*"

# $name, ${name}, ${name:format} and the old [[name]].
_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]")


class UnknownVariable(KeyError):
    """A query names a variable neither the dashboard nor Grafana defines."""


def dashboard_variables(dashboard: Mapping[str, Any]) -> list[str]:
    return [v["name"] for v in (dashboard.get("templating") or {}).get("list", [])]


def substitute_variables(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with every variable replaced from `values`, then from `BUILTINS`."""
    def replace(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        if name in values:
            return values[name]
        if name in BUILTINS:
            return BUILTINS[name]
        raise UnknownVariable(f"query uses ${name}, which is not a dashboard variable: {expr}")
    return _VARIABLE.sub(replace, expr)


def _data_panels(panels: list[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for panel in panels:
        if panel.get("type") == "row":
            yield from _data_panels(panel.get("panels") or [])  # a collapsed row holds its own
        else:
            yield panel


def panel_queries(dashboard: Mapping[str, Any], values: Mapping[str, str] | None = None,
                  ) -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, PromQL) for every query, variables substituted.

    Dashboard variables default to ``.*``; `values` overrides some (e.g. a broker id, for a
    drill-down whose peer queries exclude the chosen broker).
    """
    filled = {name: ALL for name in dashboard_variables(dashboard)}
    filled.update(values or {})
    uid = dashboard["uid"]
    return [(uid, panel.get("title", ""), substitute_variables(t["expr"], filled))
            for panel in _data_panels(dashboard.get("panels") or [])
            for t in panel.get("targets") or [] if t.get("expr")]


def data_panels(dashboard: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every panel that draws data (rows and text panels left out)."""
    return [p for p in _data_panels(dashboard.get("panels") or []) if p.get("type") != "text"]
