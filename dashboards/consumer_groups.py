"""Consumer groups: offset rewinds and resets, what caused them, and consumer traffic.

A rewind (a committed offset moving backwards) means duplicates; an automatic reset to
latest means possible loss. kmon's offset_rewind and offset_reset findings say which group
and partition, and correlation links them to the unclean election or log truncation that
caused them, so those findings sit next to them here. Consumer lag has no Prometheus series
yet: a text panel says where it lives (gold.offset_lag_1m) instead of inventing a metric.
"""

from __future__ import annotations

from typing import Any

from dashboards import metric_names as m
from dashboards.layout import KmonDashboard
from dashboards.panels import (OK_UNLESS_ABOVE_ZERO, query, stat_panel, table_panel,
                               text_panel, timeseries_panel)
from dashboards.variables import BROKERS, CLUSTER

UID = "kmon-consumer-groups"
TITLE = "kmon / Consumer groups"
OFFSET_TYPES = 'type=~"offset_rewind|offset_reset"'
CAUSE_TYPES = 'type=~"unclean_election|log_truncation"'
# What consumers send: fetches, commits, and ListOffsets (what an offset reset asks).
CONSUMER_REQUESTS = 'request=~"FetchConsumer|OffsetCommit|OffsetFetch|ListOffsets"'

LAG_NOTE = """\
**Consumer lag is not in Prometheus yet.** kmon computes it per cluster, group, topic,
partition and minute in the lake table `gold.offset_lag_1m`: the partition's latest offset
against the group's last commit at or before the minute's end. Query it with Spark SQL:

```sql
SELECT window_start, group_id, topic, partition, committed_offset, end_offset, lag,
       committed_below_start
FROM gold.offset_lag_1m
WHERE cluster = '<cluster>' AND window_start > current_timestamp() - INTERVAL 1 HOUR
ORDER BY lag DESC LIMIT 50
```

`committed_below_start` = true: the commit points below the log start offset, so the
group's next fetch is out of range and it will reset (see the findings above).
"""


def build() -> dict[str, Any]:
    d = KmonDashboard(UID, TITLE, "Offset rewinds and resets found by kmon, their causes, "
                      "and consumer traffic.")

    d.row("Rewinds and resets")
    d.add(
        stat_panel("Open offset rewinds", "Committed offsets that moved backwards: the group "
                   "re-reads (duplicates).",
                   [query(f'sum({m.FINDINGS_OPEN_COUNT}{{{CLUSTER}, type="offset_rewind"}})')],
                   steps=OK_UNLESS_ABOVE_ZERO, width=8),
        stat_panel("Open offset resets", "Automatic resets after OffsetOutOfRange (to latest: "
                   "possible loss) and operator resets.",
                   [query(f'sum({m.FINDINGS_OPEN_COUNT}{{{CLUSTER}, type="offset_reset"}})')],
                   steps=OK_UNLESS_ABOVE_ZERO, width=8),
        stat_panel("Open unclean elections and truncations", "The usual root causes: data past "
                   "the new leader's end was cut, consumers past it reset.",
                   [query(f"sum({m.FINDINGS_OPEN_COUNT}{{{CLUSTER}, {CAUSE_TYPES}}})")],
                   steps=OK_UNLESS_ABOVE_ZERO, width=8),
        timeseries_panel("Open rewind and reset findings", "Over time, by type and severity.",
                         [query(f"sum by (type, severity) "
                                f"({m.FINDINGS_OPEN_COUNT}{{{CLUSTER}, {OFFSET_TYPES}}})",
                                "{{type}} {{severity}}")], width=24),
        table_panel("Rewind and reset findings", "entity is group:<group>/<topic>-<partition>. "
                    "Findings with the same incident share a cause; look the finding id up in "
                    "gold.anomalies for the offsets and the duplicate or loss estimate.",
                    [query(f"{m.FINDINGS_OPEN}{{{CLUSTER}, {OFFSET_TYPES}}}", instant=True,
                           table_format=True)],
                    hide=("Time", "Value", "__name__", "job", "instance")),
        table_panel("Possible causes: unclean elections and log truncations",
                    "Open findings that correlation links rewinds and resets to.",
                    [query(f"{m.FINDINGS_OPEN}{{{CLUSTER}, {CAUSE_TYPES}}}", instant=True,
                           table_format=True)],
                    hide=("Time", "Value", "__name__", "job", "instance"), height=6),
    )

    d.row("Consumer lag")
    d.add(text_panel("Consumer lag lives in the lake", LAG_NOTE, height=9))

    d.row("Consumer traffic")
    d.add(
        timeseries_panel("Bytes out and in by topic", "Consumers re-reading what they already "
                         "read show as bytes out rising with no rise in bytes in.",
                         [query(f"sum by (cluster, topic) (rate({m.BYTES_OUT}"
                                f'{{{BROKERS}, topic!=""}}[$__rate_interval]))',
                                "{{topic}} out"),
                          query(f"sum by (cluster, topic) (rate({m.BYTES_IN}"
                                f'{{{BROKERS}, topic!=""}}[$__rate_interval]))',
                                "{{topic}} in")],
                         unit="Bps"),
        timeseries_panel("Consumer requests per second", "FetchConsumer, OffsetCommit, "
                         "OffsetFetch and ListOffsets (a reset looks the new position up with "
                         "ListOffsets).",
                         [query(f"sum by (cluster, request) (rate({m.TOTAL.count}"
                                f"{{{BROKERS}, {CONSUMER_REQUESTS}}}[$__rate_interval]))",
                                "{{request}}")],
                         unit="reqps"),
    )
    return d.to_json()
