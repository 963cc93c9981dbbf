"""Pipeline health: is kmon itself seeing everything?

A monitor that silently stops is worse than none. Two halves: the Spark streaming queries
(bronze/silver/gold jobs and detectors, from kmon/exporter.py: up, batch duration, input
rate, time since the last progress, rows sent to quarantine) and the edge agents (from
ingest/agent_metrics.py: records published or quarantined, failed flushes, dropped
records, time since the last durable flush, bytes of source not yet published). These
series are per query, stream and agent, not per Kafka cluster: one pipeline serves every
cluster, so the cluster and broker variables do not filter them.
"""

from __future__ import annotations

from typing import Any

from dashboards import metric_names as m
from dashboards.layout import KmonDashboard
from dashboards.panels import OK_UNLESS_ABOVE_ZERO, query, stat_panel, timeseries_panel

UID = "kmon-pipeline-health"
TITLE = "kmon / Pipeline health"
QUERY_LAG_ALERT_S = 600  # alerts/kmon-rules.yml KmonPipelineQueryLagHigh
QUARANTINE_SHARE_ALERT = 0.05  # alerts/kmon-rules.yml KmonAgentQuarantineRatioHigh

# prometheus_client creates a labelled series on its first increment, so an agent that never
# quarantined a record or failed a flush has no such series. "or 0 * <a series every agent
# has>" draws those agents at 0 instead of leaving the panel empty.
_all_records = f"sum by (agent, stream) (rate({m.AGENT_RECORDS}[$__rate_interval]))"
_quarantined = (f'sum by (agent, stream) (rate({m.AGENT_RECORDS}{{outcome="quarantined"}}'
                f"[$__rate_interval]))")
_agents = f"max by (agent) ({m.AGENT_LAST_FLUSH})"


def build() -> dict[str, Any]:
    d = KmonDashboard(UID, TITLE, "kmon's streaming queries and edge agents: up, throughput, "
                      "lag, quarantine, flushes.")

    d.row("Streaming queries")
    d.add(
        stat_panel("Queries up", "1 while a streaming query is active, 0 once it stopped "
                   "(it failed or was stopped).",
                   [query(f"max by (query) ({m.PIPELINE_QUERY_UP})", "{{query}}")],
                   steps=((None, "red"), (1, "green")), width=24),
        timeseries_panel("Batch duration", "How long each query's last trigger took. Longer "
                         "than the trigger interval: the query falls behind.",
                         [query(f"max by (query) ({m.PIPELINE_BATCH_DURATION})", "{{query}}")],
                         unit="s", width=8),
        timeseries_panel("Input rows per second", "Rows arriving at each query. A source that "
                         "drops to 0 while its cluster is busy: an agent or topic stopped.",
                         [query(f"sum by (query) ({m.PIPELINE_INPUT_ROWS})", "{{query}}")],
                         unit="rowsps", width=8),
        timeseries_panel("Time since last progress", "Spark reports progress after each batch "
                         "and every 10 s while idle, so this stays small on a live query.",
                         [query(f"max by (query) ({m.PIPELINE_QUERY_LAG})", "{{query}}")],
                         unit="s", width=8, steps=((None, "green"), (QUERY_LAG_ALERT_S, "red"))),
        timeseries_panel("Rows quarantined per second", "Rows the jobs sent to "
                         "silver.quarantine with their reason, per stream: bad input kept, "
                         "not dropped. Look the reasons up there.",
                         [query(f"sum by (stream) (rate({m.PIPELINE_ROWS_QUARANTINED}"
                                "[$__rate_interval]))", "{{stream}}")],
                         unit="rowsps", width=24),
    )

    d.row("Edge agents")
    d.add(
        timeseries_panel("Records per second by outcome", "Records each agent published or "
                         "sent to quarantine, per stream.",
                         [query(f"sum by (agent, stream, outcome) "
                                f"(rate({m.AGENT_RECORDS}[$__rate_interval]))",
                                "{{agent}} {{stream}} {{outcome}}")],
                         unit="rowsps"),
        timeseries_panel("Quarantined share", "Share of an agent's records that failed to "
                         "parse. A jump usually means a new Kafka or client version wrote a "
                         "format the parsers do not know.",
                         [query(f"({_quarantined} or 0 * {_all_records}) / {_all_records}",
                                "{{agent}} {{stream}}")],
                         unit="percentunit",
                         steps=((None, "green"), (QUARANTINE_SHARE_ALERT, "red"))),
        timeseries_panel("Flush failures and dropped records", "A failed flush keeps the "
                         "source position, so records are re-sent, not lost; dropped records "
                         "are lost (e.g. a log rotated away while the sink was down).",
                         [query(f"sum by (agent) (increase({m.AGENT_FLUSH_FAILURES}"
                                f"[$__rate_interval])) or 0 * {_agents}",
                                "{{agent}} flush failures"),
                          query(f"sum by (agent, reason) (increase({m.AGENT_DROPPED}"
                                "[$__rate_interval]))", "{{agent}} dropped: {{reason}}")],
                         width=8, steps=OK_UNLESS_ABOVE_ZERO),
        timeseries_panel("Time since last successful flush", "Grows while an agent cannot make "
                         "records durable (sink down) or has nothing to read.",
                         [query(f"time() - max by (agent) ({m.AGENT_LAST_FLUSH})", "{{agent}}")],
                         unit="s", width=8),
        timeseries_panel("Source lag", "Bytes of each source file an agent has not published "
                         "yet. Growing: the agent cannot keep up or cannot flush.",
                         [query(f"max by (agent, source) ({m.AGENT_SOURCE_LAG_BYTES})",
                                "{{agent}} {{source}}")],
                         unit="bytes", width=8),
    )
    return d.to_json()
