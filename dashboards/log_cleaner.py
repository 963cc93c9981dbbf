"""Log cleaner: is compaction keeping up, and is the cleaner alive?

Compacted topics (``__consumer_offsets`` among them) grow without bound when the cleaner
falls behind or dies. The broker's cleaner gauges say how dirty the dirtiest log is, how
long since the cleaner last ran, how long the worst log has waited past its compaction
delay, which partitions it gave up on, and whether cleaner threads died; kmon's
compaction_lag findings say which partitions it judged to be lagging.
"""

from __future__ import annotations

from typing import Any

from dashboards import metric_names as m
from dashboards.layout import KmonDashboard
from dashboards.panels import (OK_UNLESS_ABOVE_ZERO, query, stat_panel, table_panel,
                               timeseries_panel)
from dashboards.variables import BROKERS, CLUSTER

UID = "kmon-log-cleaner"
TITLE = "kmon / Log cleaner"


def _by_broker(metric: str, agg: str = "max") -> str:
    # Uncleanable counts come per log directory; a broker's figure is their sum.
    return f"{agg} by (cluster, broker) ({metric}{{{BROKERS}}})"


def build() -> dict[str, Any]:
    d = KmonDashboard(UID, TITLE, "Log cleaner progress and health per broker, and kmon's "
                      "compaction_lag findings.")

    d.row("Health")
    d.add(
        stat_panel("Dead cleaner threads", "Cleaner threads that died (usually on a corrupt or "
                   "oversized record); compaction stops for the logs they owned until restart.",
                   [query(f"sum({m.CLEANER_DEAD_THREADS}{{{BROKERS}}})")],
                   steps=OK_UNLESS_ABOVE_ZERO),
        stat_panel("Uncleanable partitions", "Partitions the cleaner gave up on (marked "
                   "uncleanable after an error).",
                   [query(f"sum({m.CLEANER_UNCLEANABLE_PARTITIONS}{{{BROKERS}}})")],
                   steps=OK_UNLESS_ABOVE_ZERO),
        stat_panel("Open compaction_lag findings", "Brokers whose cleaner kmon judged dead, "
                   "stalled or skipping logs, and compacted partitions that keep growing.",
                   [query(f'sum({m.FINDINGS_OPEN_COUNT}{{{CLUSTER}, type="compaction_lag"}})')],
                   steps=OK_UNLESS_ABOVE_ZERO),
        stat_panel("Max dirty ratio", "The dirtiest compacted log's uncompacted share.",
                   [query(f"max({m.CLEANER_MAX_DIRTY_PERCENT}{{{BROKERS}}})")],
                   unit="percent", steps=((None, "green"), (50, "orange"), (80, "red"))),
    )

    d.row("Progress per broker")
    d.add(
        timeseries_panel("Max dirty percent", "Dirty share of the dirtiest log. Rising past "
                         "min.cleanable.dirty.ratio and staying there: the cleaner is behind. "
                         "It is computed when a thread picks a log, so it freezes when the "
                         "threads stop: read it with the time since the last run.",
                         [query(_by_broker(m.CLEANER_MAX_DIRTY_PERCENT), "{{cluster}}/{{broker}}")],
                         unit="percent", width=8),
        timeseries_panel("Time since last cleaner run", "An idle cleaner looks for work every "
                         "log.cleaner.backoff.ms (15 s), so this stays small; it grows while "
                         "the threads are dead, hung or busy on one huge log.",
                         [query(_by_broker(m.CLEANER_TIME_SINCE_LAST_RUN_MS),
                                "{{cluster}}/{{broker}}")],
                         unit="ms", width=8),
        timeseries_panel("Max compaction delay", "How far past its max.compaction.lag.ms the "
                         "most overdue log is; any value above 0 misses a topic's contract.",
                         [query(_by_broker(m.CLEANER_MAX_COMPACTION_DELAY_SECS),
                                "{{cluster}}/{{broker}}")],
                         unit="s", width=8),
        timeseries_panel("Uncleanable partitions and bytes", "What the cleaner skips; these "
                         "logs are never compacted until the cause is fixed.",
                         [query(_by_broker(m.CLEANER_UNCLEANABLE_PARTITIONS, "sum"),
                                "{{cluster}}/{{broker}} partitions"),
                          query(_by_broker(m.CLEANER_UNCLEANABLE_BYTES, "sum"),
                                "{{cluster}}/{{broker}} bytes")], width=8),
        timeseries_panel("Dead cleaner threads by broker", "Should stay 0.",
                         [query(_by_broker(m.CLEANER_DEAD_THREADS), "{{cluster}}/{{broker}}")],
                         width=8, steps=OK_UNLESS_ABOVE_ZERO),
        timeseries_panel("Cleaner buffer use and recopy", "Buffer utilisation near 100%: the "
                         "offset map is too small (log.cleaner.dedupe.buffer.size). Recopy: "
                         "share of bytes rewritten unchanged.",
                         [query(_by_broker(m.CLEANER_MAX_BUFFER_UTILIZATION),
                                "{{cluster}}/{{broker}} buffer"),
                          query(_by_broker(m.CLEANER_RECOPY_PERCENT),
                                "{{cluster}}/{{broker}} recopy")],
                         unit="percent", width=8),
    )

    d.row("Findings")
    d.add(table_panel("compaction_lag findings", "entity is a broker (its cleaner is "
                      "dead, stalled or skipping logs) or a compacted partition that keeps "
                      "growing; the cause column names the rule, the finding's evidence in "
                      "gold.anomalies lists every rule's result.",
                      [query(f'{m.FINDINGS_OPEN}{{{CLUSTER}, type="compaction_lag"}}',
                             instant=True, table_format=True)],
                      hide=("Time", "Value", "__name__", "job", "instance")))
    return d.to_json()
