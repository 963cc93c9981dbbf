"""Panel and query factories: the few shapes kmon's dashboards are made of.

Each factory takes the panel's title, a description saying what the panel shows and how to
read it, and its queries, and fills in what every kmon panel shares (the data source
variable, refIds A, B, C..., units). Layout and panel ids are dashboards/layout.py's job.
"""

from __future__ import annotations

import string
from typing import Sequence

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, table, text, timeseries
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm
from grafana_foundation_sdk.models import text as tm

from dashboards.variables import DATASOURCE

# (value, colour) steps; the first step's value is None (from minus infinity).
Steps = Sequence[tuple[float | None, str]]

OK_UNLESS_ABOVE_ZERO: Steps = ((None, "green"), (1, "red"))


def query(expr: str, legend: str = "", *, instant: bool = False,
          table_format: bool = False) -> prometheus.Dataquery:
    """One PromQL target; `instant` for stats and tables (the latest value only)."""
    q = prometheus.Dataquery().expr(expr).datasource(DATASOURCE)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant()
    else:
        q = q.range()
    if table_format:
        q = q.format(pm.PromQueryFormat.TABLE)
    return q


def _with_targets(panel, queries: Sequence[prometheus.Dataquery]):
    if not queries:
        raise ValueError("a data panel needs at least one query")
    for ref, q in zip(string.ascii_uppercase, queries):
        panel = panel.with_target(q.ref_id(ref))
    return panel


def thresholds(steps: Steps) -> db.ThresholdsConfig:
    return (db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE)
            .steps([dm.Threshold(value=v, color=c) for v, c in steps]))


def timeseries_panel(title: str, description: str, queries: Sequence[prometheus.Dataquery], *,
                     unit: str = "short", width: int = 12, height: int = 8,
                     min_value: float | None = 0, steps: Steps | None = None,
                     ) -> timeseries.Panel:
    """Lines over time, legend as a table with the last and max value of each series."""
    panel = (timeseries.Panel().title(title).description(description).datasource(DATASOURCE)
             .unit(unit).span(width).height(height).line_width(1).fill_opacity(10)
             .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE)
                     .placement(cm.LegendPlacement.BOTTOM).show_legend(True)
                     .calcs(["lastNotNull", "max"]))
             .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI)
                      .sort(cm.SortOrder.DESCENDING)))
    if min_value is not None:
        panel = panel.min(min_value)
    if steps:
        panel = (panel.thresholds(thresholds(steps))
                 .thresholds_style(cb.GraphThresholdsStyleConfig()
                                   .mode(cm.GraphThresholdsStyleMode.LINE)))
    return _with_targets(panel, queries)


def stat_panel(title: str, description: str, queries: Sequence[prometheus.Dataquery], *,
               unit: str = "short", width: int = 6, height: int = 4,
               steps: Steps = ((None, "green"),)) -> stat.Panel:
    """One big number per series, coloured by `steps`, with a sparkline."""
    panel = (stat.Panel().title(title).description(description).datasource(DATASOURCE)
             .unit(unit).span(width).height(height)
             .color_mode(cm.BigValueColorMode.BACKGROUND)
             .graph_mode(cm.BigValueGraphMode.AREA)
             .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
             .thresholds(thresholds(steps)))
    return _with_targets(panel, queries)


def table_panel(title: str, description: str, queries: Sequence[prometheus.Dataquery], *,
                hide: Sequence[str] = ("Time", "Value", "__name__"), width: int = 24,
                height: int = 8) -> table.Panel:
    """Rows of the latest series, one column per label; `hide` drops the columns named."""
    panel = (table.Panel().title(title).description(description).datasource(DATASOURCE)
             .span(width).height(height)
             .with_transformation(dm.DataTransformerConfig(
                 id_val="organize",
                 options={"excludeByName": {name: True for name in hide}})))
    return _with_targets(panel, queries)


def text_panel(title: str, markdown: str, *, width: int = 24, height: int = 5) -> text.Panel:
    return (text.Panel().title(title).mode(tm.TextMode.MARKDOWN).content(markdown)
            .span(width).height(height))
