"""The Spark SQL behind every number of an incident report, as text.

Each function returns one statement over the registered table names (gold.x, silver.x,
see jobs/lake.register_tables) that an engineer can run as it is. The report runs exactly
this text, so the numbers shown and the SQL printed under them cannot drift apart.

Conventions: times go in as epoch milliseconds (`timestamp_millis(...)`) and come out
as `t_ms` (`unix_millis(...)`, the bucket start), so nothing depends on the session or
the reader's time zone; string values are quoted with `literal`; gold and silver tables
are partitioned by `date`, so every range filter also names the dates, a day wider on
each side (partition pruning on a fleet's tables, right in any session time zone). Series wider than one bucket per minute take the max of
the minute p99s in the bucket: a p99 of p99s cannot be computed, and the max keeps a
spike visible.
"""

from __future__ import annotations

from core.findings import Severity
from jobs.gold_windows import STAGES
from jobs.histogram_sql import collected_quantile_sql, collected_sql
from jobs.pipeline_config import PipelineSection

ANOMALIES = "gold.anomalies"
STAGES_1M = "gold.request_stages_1m"
# Per broker, request key and 10-s window, the edge's stage histograms (jobs/gold_windows.py
# merges them into STAGES_1M).
STAGES_SILVER = "silver.request_windows"
COMMITS_1M = "gold.offset_commits_1m"
LAG_1M = "gold.offset_lag_1m"
COMMITS_SILVER = "silver.offset_commits"
ENDS_SILVER = "silver.partition_offsets"

# Finding.to_row() columns (is_root_cause is derived: finding_id = incident_id).
FINDING_COLUMNS = ("finding_id", "cluster", "type", "severity", "entity_kind", "entity",
                   "first_seen_ms", "last_seen_ms", "status", "evidence_json", "cause",
                   "explanation", "suggested_action", "incident_id", "related", "resolved_ms")

STAGE_NAMES = STAGES                                  # total, request_queue, ...
P99_COLUMNS = tuple(f"{n}_p99_ms" for n in STAGE_NAMES)
MINUTE_MS = 60_000
# Candidate bucket widths; the report uses the narrowest that keeps a series this short.
BUCKETS_MS = (MINUTE_MS, 5 * MINUTE_MS, 15 * MINUTE_MS, 60 * MINUTE_MS, 360 * MINUTE_MS,
              1440 * MINUTE_MS)
MAX_POINTS = 720
# How far before the window a rewind query looks for the commit a rewind moved back from.
REWIND_LOOKBACK_MS = 60 * MINUTE_MS
# How far before the window the lag from silver looks for the group's last commit: what
# gold.offset_lag_1m looks back by default ([pipeline] offset_lag_lookback_days).
LAG_LOOKBACK_MS = PipelineSection().offset_lag_lookback_days * 1440 * MINUTE_MS


def literal(value: str) -> str:
    """A Spark SQL string literal (backslash escapes, the parser default)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def bucket_ms(start_ms: int, end_ms: int) -> int:
    for b in BUCKETS_MS:
        if (end_ms - start_ms) / b <= MAX_POINTS:
            return b
    return BUCKETS_MS[-1]


def _ts(ms: int) -> str:
    return f"timestamp_millis({int(ms)})"


def _range(column: str, start_ms: int, end_ms: int) -> str:
    # The date partitions were written in UTC; a day of slack on each side keeps the
    # pruning right in a session with another time zone.
    return (f"date BETWEEN date_sub(to_date({_ts(start_ms)}), 1) "
            f"AND date_add(to_date({_ts(end_ms)}), 1)\n"
            f"  AND {column} >= {_ts(start_ms)} AND {column} < {_ts(end_ms)}")


def _ceil_minute(ms: int) -> int:
    return -(-int(ms) // MINUTE_MS) * MINUTE_MS


def _minutes_range(column: str, start_ms: int, end_ms: int) -> str:
    """Rows whose minute starts in [start, end): the whole minutes a gold table holds for
    `_range('window_start', start_ms, end_ms)`, not parts of the first or the last."""
    return _range(column, _ceil_minute(start_ms), _ceil_minute(end_ms))


def _bucket(column: str, width_ms: int) -> str:
    return f"unix_millis({column}) div {width_ms} * {width_ms}"


# --- findings ----------------------------------------------------------------------------

def incident_filter(incident_id: str) -> str:
    """An incident's findings; a finding linked to nothing can be reported by its own id."""
    return f"incident_id = {literal(incident_id)} OR finding_id = {literal(incident_id)}"


def range_filter(start_ms: int, end_ms: int, cluster: str | None = None) -> str:
    """Findings seen at any time inside [start, end)."""
    cond = f"first_seen_ms < {int(end_ms)} AND last_seen_ms >= {int(start_ms)}"
    return cond + (f" AND cluster = {literal(cluster)}" if cluster else "")


def findings(where: str) -> str:
    return (f"SELECT {', '.join(FINDING_COLUMNS)}\nFROM {ANOMALIES}\nWHERE {where}\n"
            f"ORDER BY first_seen_ms, finding_id")


def finding(finding_id: str) -> str:
    return (f"SELECT {', '.join(FINDING_COLUMNS)}\nFROM {ANOMALIES}\n"
            f"WHERE finding_id = {literal(finding_id)}")


def summary(where: str) -> str:
    ranked = "array(" + ", ".join(literal(s.value) for s in Severity) + ")"
    return (f"SELECT count(*) AS findings,\n"
            f"  min(first_seen_ms) AS first_seen_ms,\n"
            f"  max(last_seen_ms) AS last_seen_ms,\n"
            f"  element_at({ranked}, CAST(min(array_position({ranked}, severity)) AS INT))"
            f" AS worst_severity,\n"
            f"  count_if(status = 'open') AS open_findings,\n"
            f"  array_sort(collect_set(CASE WHEN finding_id = incident_id THEN finding_id END))"
            f" AS root_finding_ids\n"
            f"FROM {ANOMALIES}\nWHERE {where}")


# --- request stages ----------------------------------------------------------------------

def _broker_filter(cluster: str, broker: int) -> str:
    return f"cluster = {literal(cluster)} AND broker = {int(broker)}"


def broker_apis_gold(cluster: str, broker: int, start_ms: int, end_ms: int) -> str:
    return (f"SELECT api, sum(requests) AS requests\nFROM {STAGES_1M}\n"
            f"WHERE {_broker_filter(cluster, broker)}\n"
            f"  AND {_range('window_start', start_ms, end_ms)}\n"
            f"GROUP BY api\nORDER BY requests DESC, api")


def broker_apis_silver(cluster: str, broker: int, start_ms: int, end_ms: int) -> str:
    return (f"SELECT api, sum(requests) AS requests\nFROM {STAGES_SILVER}\n"
            f"WHERE {_broker_filter(cluster, broker)}\n"
            f"  AND NOT coalesce(is_controller_traffic, false)\n"
            f"  AND {_range('ts', start_ms, end_ms)}\n"
            f"GROUP BY api\nORDER BY requests DESC, api")


def stages_gold(cluster: str, broker: int, api: str, start_ms: int, end_ms: int) -> str:
    width = bucket_ms(start_ms, end_ms)
    where = (f"WHERE {_broker_filter(cluster, broker)} AND api = {literal(api)}\n"
             f"  AND {_range('window_start', start_ms, end_ms)}\n")
    if width == MINUTE_MS:
        cols = ", ".join(("requests", *P99_COLUMNS))
        return (f"SELECT unix_millis(window_start) AS t_ms, {cols}\nFROM {STAGES_1M}\n"
                f"{where}ORDER BY t_ms")
    cols = ",\n  ".join(["sum(requests) AS requests",
                         *(f"max({c}) AS {c}" for c in P99_COLUMNS)])
    return (f"SELECT {_bucket('window_start', width)} AS t_ms,\n  {cols}\nFROM {STAGES_1M}\n"
            f"{where}GROUP BY 1\nORDER BY t_ms")


def stages_silver(cluster: str, broker: int, api: str, start_ms: int, end_ms: int) -> str:
    """The same p99s straight from silver (gold has none for the window)."""
    return (_silver_stage_p99s(cluster, broker, api, start_ms, end_ms,
                               bucket_ms(start_ms, end_ms)) + "\nORDER BY t_ms")


def _silver_stage_p99s(cluster: str, broker: int, api: str, start_ms: int, end_ms: int,
                       width: int) -> str:
    """Per bucket of `width`: t_ms, requests and each stage's p99 from the histograms of
    silver.request_windows, every key, window and emission of the bucket merged (within
    the bucket scheme's 2 %)."""
    where = (f"WHERE {_broker_filter(cluster, broker)} AND api = {literal(api)}\n"
             f"  AND NOT coalesce(is_controller_traffic, false)\n"
             f"  AND {_range('ts', start_ms, end_ms)}\n"
             f"GROUP BY 1")
    hists = ",\n    ".join(["sum(requests) AS requests",
                              *(f"{collected_sql(n)} AS {n}" for n in STAGE_NAMES)])
    p99s = ",\n  ".join(["requests", *(f"{collected_quantile_sql(n, 0.99)} AS {c}"
                                        for n, c in zip(STAGE_NAMES, P99_COLUMNS))])
    return (f"SELECT t_ms,\n  {p99s}\nFROM (\n  SELECT {_bucket('ts', width)} AS t_ms,\n"
            f"    {hists}\n  FROM {STAGES_SILVER}\n{_indent(where)}\n)")


def _indent(sql: str, by: str = "  ") -> str:
    return "\n".join(by + line for line in sql.split("\n"))


def _gold_then_silver(gold: str | None, silver: str, columns: tuple[str, ...],
                      bucketed: tuple[str, ...], width: int) -> str:
    """One statement over two per-minute statements with the same columns (t_ms first):
    `gold`'s minutes (None: no gold table), then `silver`'s after gold's last one, each row
    with its `source`; bucketed by `bucketed` (aggregates over the minutes) when `width` is
    wider than a minute, a bucket's source "gold + silver" when it holds both."""
    if gold is None:
        cte = (f"WITH silver_minutes AS (\n{_indent(silver)}\n), minutes AS (\n"
               f"  SELECT *, 'silver' AS source FROM silver_minutes\n)\n")
    else:
        cte = (f"WITH gold_minutes AS (\n{_indent(gold)}\n"
               f"), silver_minutes AS (\n{_indent(silver)}\n"
               f"), minutes AS (\n"
               f"  SELECT *, 'gold' AS source FROM gold_minutes\n"
               f"  UNION ALL\n"
               f"  SELECT *, 'silver' AS source FROM silver_minutes\n"
               f"  WHERE t_ms > (SELECT coalesce(max(t_ms), -1) FROM gold_minutes)\n"
               f")\n")
    if width == MINUTE_MS:
        return (f"{cte}SELECT {', '.join(('t_ms', *columns, 'source'))}\nFROM minutes\n"
                f"ORDER BY t_ms")
    cols = ",\n  ".join([*bucketed,
                         "array_join(array_sort(collect_set(source)), ' + ') AS source"])
    return (f"{cte}SELECT t_ms div {width} * {width} AS t_ms,\n  {cols}\nFROM minutes\n"
            f"GROUP BY 1\nORDER BY t_ms")


def stages_gold_then_silver(cluster: str, broker: int, api: str, start_ms: int,
                            end_ms: int) -> str:
    """The gold minutes, then the minutes after gold's last one computed from silver.

    The gold job writes a minute only once its watermark has passed it (append mode, 2
    minutes late at least), and a report written right after an incident (the demo's, at
    its end) would otherwise stop minutes before the incident did. Per minute first (gold
    rows, silver's percentiles for the minutes after them), then bucketed like
    `stages_gold` when the window is too long for minutes. `source` says where each row
    came from ("gold", "silver", or "gold + silver" for a bucket of both)."""
    gold_sql = (f"SELECT unix_millis(window_start) AS t_ms, "
                f"{', '.join(('requests', *P99_COLUMNS))}\nFROM {STAGES_1M}\n"
                f"WHERE {_broker_filter(cluster, broker)} AND api = {literal(api)}\n"
                f"  AND {_range('window_start', start_ms, end_ms)}")
    silver_sql = _silver_stage_p99s(cluster, broker, api, start_ms, end_ms, MINUTE_MS)
    bucketed = ("sum(requests) AS requests", *(f"max({c}) AS {c}" for c in P99_COLUMNS))
    return _gold_then_silver(gold_sql, silver_sql, ("requests", *P99_COLUMNS), bucketed,
                             bucket_ms(start_ms, end_ms))


# --- offsets -----------------------------------------------------------------------------

def _group_filter(cluster: str, group: str, topic: str, partition: int) -> str:
    return (f"cluster = {literal(cluster)} AND group_id = {literal(group)}\n"
            f"  AND topic = {literal(topic)} AND partition = {int(partition)}")


def partition_groups(cluster: str, topic: str, partition: int, start_ms: int,
                     end_ms: int, limit: int) -> str:
    """The groups that committed on a partition in the window, busiest first."""
    return (f"SELECT group_id, sum(commits) AS commits\nFROM {COMMITS_1M}\n"
            f"WHERE cluster = {literal(cluster)} AND topic = {literal(topic)}"
            f" AND partition = {int(partition)}\n  AND {_range('window_start', start_ms, end_ms)}\n"
            f"GROUP BY group_id\nORDER BY commits DESC, group_id\nLIMIT {int(limit)}")


def committed_offsets(cluster: str, group: str, topic: str, partition: int, start_ms: int,
                      end_ms: int) -> str:
    width = bucket_ms(start_ms, end_ms)
    where = (f"WHERE {_group_filter(cluster, group, topic, partition)}\n"
             f"  AND {_range('window_start', start_ms, end_ms)}\n")
    if width == MINUTE_MS:
        return (f"SELECT unix_millis(window_start) AS t_ms, last_offset, min_offset, max_offset,"
                f" commits\nFROM {COMMITS_1M}\n{where}ORDER BY t_ms")
    return (f"SELECT {_bucket('window_start', width)} AS t_ms,\n"
            f"  max_by(last_offset, window_start) AS last_offset, min(min_offset) AS min_offset,\n"
            f"  max(max_offset) AS max_offset, sum(commits) AS commits\nFROM {COMMITS_1M}\n"
            f"{where}GROUP BY 1\nORDER BY t_ms")


def lag(cluster: str, group: str, topic: str, partition: int, start_ms: int,
        end_ms: int) -> str:
    width = bucket_ms(start_ms, end_ms)
    where = (f"WHERE {_group_filter(cluster, group, topic, partition)}\n"
             f"  AND {_range('window_start', start_ms, end_ms)}\n")
    if width == MINUTE_MS:
        return (f"SELECT unix_millis(window_start) AS t_ms, lag, committed_offset, end_offset,"
                f" start_offset\nFROM {LAG_1M}\n{where}ORDER BY t_ms")
    return (f"SELECT {_bucket('window_start', width)} AS t_ms,\n"
            f"  max(lag) AS lag, max_by(committed_offset, window_start) AS committed_offset,\n"
            f"  max_by(end_offset, window_start) AS end_offset,\n"
            f"  max_by(start_offset, window_start) AS start_offset\nFROM {LAG_1M}\n"
            f"{where}GROUP BY 1\nORDER BY t_ms")


COMMIT_COLUMNS = ("last_offset", "min_offset", "max_offset", "commits")
LAG_COLUMNS = ("lag", "committed_offset", "end_offset", "start_offset")


def committed_offsets_with_silver(cluster: str, group: str, topic: str, partition: int,
                                  start_ms: int, end_ms: int, gold: bool = True) -> str:
    """`committed_offsets` from the gold minutes, then the minutes after gold's last one
    computed from silver.offset_commits as the gold job computes them
    (jobs/gold.offset_commits_per_minute: live commits only, the last one by ts_ms); from
    silver alone when `gold` is False (no gold table). The gold job writes a minute once
    its watermark (10 minutes) has passed it: a report written right after an incident
    would otherwise stop minutes before the incident did."""
    live = "CASE WHEN NOT is_tombstone THEN {} END"
    gold_sql = (f"SELECT unix_millis(window_start) AS t_ms, {', '.join(COMMIT_COLUMNS)}\n"
                f"FROM {COMMITS_1M}\n"
                f"WHERE {_group_filter(cluster, group, topic, partition)}\n"
                f"  AND {_range('window_start', start_ms, end_ms)}")
    silver_sql = (f"SELECT {_bucket('ts', MINUTE_MS)} AS t_ms,\n"
                  f"  max_by({live.format('offset')}, {live.format('ts_ms')}) AS last_offset,\n"
                  f"  min({live.format('offset')}) AS min_offset,\n"
                  f"  max({live.format('offset')}) AS max_offset,\n"
                  f"  sum(CAST(NOT is_tombstone AS BIGINT)) AS commits\n"
                  f"FROM {COMMITS_SILVER}\n"
                  f"WHERE {_group_filter(cluster, group, topic, partition)}\n"
                  f"  AND {_minutes_range('ts', start_ms, end_ms)}\n"
                  f"GROUP BY 1")
    bucketed = ("max_by(last_offset, t_ms) AS last_offset", "min(min_offset) AS min_offset",
                "max(max_offset) AS max_offset", "sum(commits) AS commits")
    return _gold_then_silver(gold_sql if gold else None, silver_sql, COMMIT_COLUMNS, bucketed,
                             bucket_ms(start_ms, end_ms))


def lag_with_silver(cluster: str, group: str, topic: str, partition: int, start_ms: int,
                    end_ms: int, gold: bool = True) -> str:
    """`lag` from the gold minutes, then the minutes after gold's last one computed from
    silver.partition_offsets and silver.offset_commits as the gold job computes them
    (jobs/gold.offset_lag): per minute, the partition's last end and start offsets of the
    minute against the group's newest live commit before the minute's end (looked for as
    far back as LAG_LOOKBACK_MS before the window: the commits in the window and the newest
    one before it, all a minute's commit can be; a minute before any commit has no row),
    lag floored at 0. From silver alone when `gold` is False (no gold table)."""
    first = _ceil_minute(start_ms)
    group_filter = _group_filter(cluster, group, topic, partition)
    gold_sql = (f"SELECT unix_millis(window_start) AS t_ms, {', '.join(LAG_COLUMNS)}\n"
                f"FROM {LAG_1M}\n"
                f"WHERE {group_filter}\n"
                f"  AND {_range('window_start', start_ms, end_ms)}")
    ends = (f"SELECT {_bucket('ts', MINUTE_MS)} AS t_ms,\n"
            f"  max_by(latest_offset, ts_ms) AS end_offset,\n"
            f"  max_by(earliest_offset, ts_ms) AS start_offset\n"
            f"FROM {ENDS_SILVER}\n"
            f"WHERE cluster = {literal(cluster)} AND topic = {literal(topic)}"
            f" AND partition = {int(partition)}\n"
            f"  AND {_minutes_range('ts', start_ms, end_ms)}\n"
            f"GROUP BY 1")
    commits = (f"SELECT offset, ts_ms, ts\n"
               f"FROM {COMMITS_SILVER}\n"
               f"WHERE {group_filter}\n"
               f"  AND NOT is_tombstone\n"
               f"  AND {_minutes_range('ts', start_ms, end_ms)}\n"
               f"UNION ALL\n"
               f"SELECT max_by(offset, ts_ms), max(ts_ms), max(ts)\n"
               f"FROM {COMMITS_SILVER}\n"
               f"WHERE {group_filter}\n"
               f"  AND NOT is_tombstone\n"
               f"  AND {_range('ts', first - LAG_LOOKBACK_MS, first)}")
    silver_sql = (f"SELECT e.t_ms,\n"
                  f"  greatest(e.end_offset - max_by(c.offset, c.ts_ms), 0) AS lag,\n"
                  f"  max_by(c.offset, c.ts_ms) AS committed_offset, e.end_offset,"
                  f" e.start_offset\n"
                  f"FROM (\n{_indent(ends)}\n) e\n"
                  f"JOIN (\n{_indent(commits)}\n) c ON c.ts < timestamp_millis(e.t_ms + "
                  f"{MINUTE_MS})\n"
                  f"GROUP BY e.t_ms, e.end_offset, e.start_offset")
    bucketed = ("max(lag) AS lag", "max_by(committed_offset, t_ms) AS committed_offset",
                "max_by(end_offset, t_ms) AS end_offset",
                "max_by(start_offset, t_ms) AS start_offset")
    return _gold_then_silver(gold_sql if gold else None, silver_sql, LAG_COLUMNS, bucketed,
                             bucket_ms(start_ms, end_ms))


def rewinds_silver(cluster: str, group: str, topic: str, partition: int, start_ms: int,
                   end_ms: int) -> str:
    """Every commit lower than the group's commit before it, in __consumer_offsets order."""
    since = start_ms - REWIND_LOOKBACK_MS
    return (f"SELECT t_ms, from_offset, to_offset, from_offset - to_offset AS messages_back\n"
            f"FROM (\n"
            f"  SELECT ts_ms AS t_ms, offset AS to_offset,\n"
            f"    lag(offset) OVER (PARTITION BY group_id, topic, partition\n"
            f"      ORDER BY ts_ms, source_partition, source_offset) AS from_offset\n"
            f"  FROM {COMMITS_SILVER}\n"
            f"  WHERE {_group_filter(cluster, group, topic, partition)}\n"
            f"    AND NOT is_tombstone\n"
            f"    AND {_range('ts', since, end_ms)}\n"
            f")\nWHERE to_offset < from_offset AND t_ms >= {int(start_ms)}\nORDER BY t_ms")


def rewinds_gold(cluster: str, group: str, topic: str, partition: int, start_ms: int,
                 end_ms: int) -> str:
    """Minutes whose lowest commit lies below the previous minute's last (per minute only)."""
    since = start_ms - REWIND_LOOKBACK_MS
    return (f"SELECT t_ms, from_offset, to_offset, from_offset - to_offset AS messages_back\n"
            f"FROM (\n"
            f"  SELECT unix_millis(window_start) AS t_ms, min_offset AS to_offset,\n"
            f"    lag(last_offset) OVER (PARTITION BY group_id, topic, partition\n"
            f"      ORDER BY window_start) AS from_offset\n"
            f"  FROM {COMMITS_1M}\n"
            f"  WHERE {_group_filter(cluster, group, topic, partition)}\n"
            f"    AND {_range('window_start', since, end_ms)}\n"
            f")\nWHERE to_offset < from_offset AND t_ms >= {int(start_ms)}\nORDER BY t_ms")
