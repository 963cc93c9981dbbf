"""What an incident report holds: findings in causal order and series, each with its SQL.

Every number a report shows comes from a `Query`: the Spark SQL text and the rows it
returned when the report was built, so an engineer can paste the SQL into `kmon sql` (or
any Spark session with the lake's tables registered as gold.x / silver.x) and get the
same numbers. Pure data: no Spark here, the renderer depends on this module only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from core.findings import Finding


@dataclass(frozen=True)
class Query:
    """The rows one Spark SQL statement returned, kept with the statement."""
    sql: str
    columns: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()

    def column(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]

    def points(self, name: str, time_column: str = "t_ms") -> list[tuple[int, float | None]]:
        """(epoch ms, value) pairs of one column against the time column."""
        ti, vi = self.columns.index(time_column), self.columns.index(name)
        return [(int(r[ti]), None if r[vi] is None else float(r[vi])) for r in self.rows
                if r[ti] is not None]


@dataclass(frozen=True)
class Series:
    """One plotted line: a column of the chart's query."""
    column: str
    label: str
    emphasis: bool = False  # drawn heavier (e.g. the total beside its stages)


@dataclass(frozen=True)
class Marker:
    """A vertical line on a chart at an event's time (a finding, a rewind)."""
    t_ms: int
    label: str
    kind: str  # "finding" or "rewind": a CSS class


@dataclass(frozen=True)
class Chart:
    """One time-series chart; its query's first column is `t_ms` (epoch ms, bucket start)."""
    kind: str                      # "stages", "offsets", "lag"
    title: str
    query: Query
    series: tuple[Series, ...]
    unit: str                      # "ms", "offset", "messages"
    attrs: Mapping[str, str] = field(default_factory=dict)  # data-* attributes
    source: str = ""               # the table the rows came from
    note: str = ""                 # how to read it, or why a fallback was used
    markers: tuple[Marker, ...] = ()
    zero_based: bool = True        # y axis starts at 0 (offsets do not: rewinds would flatten)


@dataclass(frozen=True)
class ChainLink:
    """One finding in causal order: `caused_by` is the finding it follows from."""
    finding: Finding
    caused_by: str | None
    depth: int
    query: Query                   # its row of gold.anomalies


@dataclass(frozen=True)
class BrokerSection:
    cluster: str
    broker: int
    apis: Query                    # api, requests in the window
    charts: tuple[Chart, ...]
    # The slowest requests its slow-broker findings hold in their evidence (slowest
    # first; evaluation/slow_requests.py) and the table they were read from.
    slow_requests: tuple[Mapping[str, Any], ...] = ()
    slow_requests_source: str = ""


@dataclass(frozen=True)
class GroupSection:
    cluster: str
    group: str
    topic: str
    partition: int
    charts: tuple[Chart, ...]
    rewinds: Query                 # t_ms, from_offset, to_offset, messages_back
    rewinds_source: str = ""


@dataclass(frozen=True)
class ReportData:
    title: str
    incident_id: str | None
    start_ms: int                  # the window the charts cover
    end_ms: int
    generated_ms: int
    summary: Query                 # one row: findings, first/last seen, worst severity, roots
    chain: tuple[ChainLink, ...]
    brokers: tuple[BrokerSection, ...] = ()
    groups: tuple[GroupSection, ...] = ()
    notes: tuple[str, ...] = ()    # what was left out or fell back, and why

    @property
    def root(self) -> Finding | None:
        """The first root cause in the chain (the incident's own root in incident mode);
        None when no finding here is one (a range that starts after the root)."""
        return next((c.finding for c in self.chain if c.finding.is_root_cause), None)

    def queries(self) -> list[Query]:
        """Every query behind the report, summary first."""
        out = [self.summary, *(c.query for c in self.chain)]
        for b in self.brokers:
            out += [b.apis, *(c.query for c in b.charts)]
        for g in self.groups:
            out += [*(c.query for c in g.charts), g.rewinds]
        return out
