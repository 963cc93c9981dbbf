"""Collect an incident report's data from the lake with Spark SQL.

Given an incident id (or a time range), `build_report` reads the findings from
gold.anomalies, orders them as causal chains (reports/chain.py), works out the brokers,
partitions and groups they name (reports/involved.py) and reads, over the incident's
time span widened by `margin_ms` on both sides:

- per broker, the p99 of every request stage per minute from gold.request_stages_1m for
  the APIs its findings name (else Produce when it has traffic, else its busiest API);
  when gold has no rows there (the gold job was down, or the window is older than gold
  keeps), the same p99s computed from silver.request_stages (in the request-log windows
  mode from the histograms of silver.request_windows);
- per group and partition (the ones named, plus every group that committed on a named
  partition, busiest first), the committed offsets per minute (gold.offset_commits_1m),
  the lag (gold.offset_lag_1m), each going on past gold's last minute with the minutes
  computed from silver (silver.offset_commits, and silver.partition_offsets for the lag)
  the way the gold job computes them, and the rewinds: commit by commit from
  silver.offset_commits when it exists, else per minute from gold.offset_commits_1m.

Every statement is run through `spark.sql` exactly as stored beside its rows
(reports/queries.py), so the SQL under each chart reproduces it. A finding's own query is
stored too; its row is taken from the findings query it is a subset of, to spare one
Spark job per finding.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterable

from core.findings import AnomalyType, Finding
from infra.lake import Lake, register_tables
from reports import queries as q
from reports.chain import causal_order
from reports.involved import involved_brokers, involved_groups, involved_partitions
from reports.report_data import (
    BrokerSection,
    ChainLink,
    Chart,
    GroupSection,
    Marker,
    Query,
    ReportData,
    Series,
)
from reports.svg_chart import utc

DEFAULT_MARGIN_MS = 15 * 60_000
MAX_BROKERS = 12
MAX_GROUPS = 12
GROUPS_PER_PARTITION = 5
MAX_MARKERS = 20
MAX_SLOW_REQUESTS = 10
STAGE_LABELS = {"total": "Total", "request_queue": "RequestQueue", "local": "Local",
                "remote": "Remote", "throttle": "Throttle", "response_queue": "ResponseQueue",
                "send": "ResponseSend"}


class ReportError(RuntimeError):
    """The report cannot be built (no anomalies table, no such incident)."""


def run_query(spark, sql: str) -> Query:
    df = spark.sql(sql)
    return Query(sql=sql, columns=tuple(df.columns),
                 rows=tuple(tuple(_plain(v) for v in r) for r in df.collect()))


def _plain(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _exists(spark, table: str) -> bool:
    return spark.catalog.tableExists(table)


def _finding_markers(findings: Iterable[Finding], cluster: str) -> tuple[Marker, ...]:
    chosen = sorted((f for f in findings if f.cluster == cluster),
                    key=lambda f: (f.severity.rank, f.first_seen_ms))[:MAX_MARKERS]
    return tuple(Marker(f.first_seen_ms, f"{f.type.value} {f.entity}", "finding")
                 for f in sorted(chosen, key=lambda f: f.first_seen_ms))


def _stage_series() -> tuple[Series, ...]:
    return tuple(Series(col, f"{STAGE_LABELS[name]} p99", emphasis=name == "total")
                 for name, col in zip(q.STAGE_NAMES, q.P99_COLUMNS))


def _choose_apis(named: set[str], apis: Query) -> list[str]:
    seen = apis.column("api") if apis.rows else []
    if named:
        return sorted(named)
    if "Produce" in seen:
        return ["Produce"]
    return seen[:1]


def _stage_rows(spark, cluster: str, broker: int, api: str, start_ms: int, end_ms: int,
                have_gold: bool, have_silver: bool) -> tuple[Query, set[str]]:
    """A broker's stage p99s over the window and the tables they came from ("gold",
    "silver"): gold's minutes, and silver's for the minutes gold has not written yet (the
    gold job lags its watermark; a report right after an incident would end before it)."""
    if have_gold and have_silver:
        rows = run_query(spark, q.stages_gold_then_silver(cluster, broker, api, start_ms,
                                                          end_ms))
        return rows, {s for v in rows.column("source") for s in v.split(" + ")}
    if have_gold:
        rows = run_query(spark, q.stages_gold(cluster, broker, api, start_ms, end_ms))
        return rows, {"gold"} if rows.rows else set()
    if have_silver:
        rows = run_query(spark, q.stages_silver(cluster, broker, api, start_ms, end_ms))
        return rows, {"silver"} if rows.rows else set()
    return Query(q.stages_gold(cluster, broker, api, start_ms, end_ms)), set()


def _slow_requests(findings: Iterable[Finding], cluster: str, broker: int) -> dict:
    """The slow requests the broker's slow-broker findings hold (evidence, read when the
    finding was evaluated: no query here), slowest first, each once."""
    held = [(f.evidence.get("slow_requests_source", ""), r) for f in findings
            if f.type is AnomalyType.SLOW_BROKER and f.cluster == cluster
            and f.evidence.get("broker") == broker
            for r in f.evidence.get("slow_requests") or ()]
    seen, out = set(), []
    for source, r in sorted(held, key=lambda h: -(h[1].get("judged_ms") or 0.0)):
        key = (r.get("ts_ms"), r.get("correlation_id"), r.get("client_id"))
        if key not in seen:
            seen.add(key)
            out.append(r)
    sources = sorted({s for s, _ in held if s})
    return {"slow_requests": tuple(out[:MAX_SLOW_REQUESTS]),
            "slow_requests_source": " + ".join(sources)}


def _broker_section(spark, cluster: str, broker: int, named_apis: set[str], start_ms: int,
                    end_ms: int, markers: tuple[Marker, ...], notes: list[str]) -> BrokerSection:
    silver = q.STAGES_SILVER
    have_gold, have_silver = _exists(spark, q.STAGES_1M), _exists(spark, silver)
    apis = Query(q.broker_apis_gold(cluster, broker, start_ms, end_ms))
    if have_gold:
        apis = run_query(spark, apis.sql)
    if not apis.rows and have_silver:
        apis = run_query(spark, q.broker_apis_silver(cluster, broker, start_ms, end_ms))
    charts = []
    for api in _choose_apis(named_apis, apis):
        attrs = {"cluster": cluster, "broker": str(broker), "api": api}
        rows, sources = _stage_rows(spark, cluster, broker, api, start_ms, end_ms,
                                    have_gold, have_silver)
        source, note = q.STAGES_1M, ("p99 of each stage per minute; the stages of one "
                                     "request add up to its total, their p99s need not")
        rows_of = f"the window histograms of {silver}"
        if sources == {"silver"}:
            source = silver
            note = (f"{q.STAGES_1M} has no rows for broker {broker} {api} in this window: "
                    f"p99s computed from {rows_of}")
            notes.append(f"Broker {broker} {api}: {note}.")
        elif "silver" in sources:
            source = f"{q.STAGES_1M} + {silver}"
            last_gold = max(t for t, s in zip(rows.column("t_ms"), rows.column("source"))
                            if "gold" in s.split(" + "))
            note = (f"{q.STAGES_1M} (written once a minute is final) has rows up to "
                    f"{utc(last_gold)} here; the minutes after its last are computed from "
                    f"{rows_of} (source: silver)")
            notes.append(f"Broker {broker} {api}: {note}.")
        if q.bucket_ms(start_ms, end_ms) != q.MINUTE_MS and "silver" not in sources:
            note = "max of the minute p99s per bucket (the window is too long for minutes)"
        charts.append(Chart(
            kind="stages", title=f"Broker {broker} — {api} request stages (p99)", query=rows,
            series=_stage_series(), unit="ms", attrs=attrs, source=source, note=note,
            markers=markers))
    return BrokerSection(cluster, broker, apis, tuple(charts))


def _offset_rows(spark, gold_sql: str, with_silver, gold_table: str,
                 silver_tables: tuple[str, ...]) -> tuple[Query, set[str]]:
    """A group chart's rows and the tables they came from ("gold", "silver"): gold's
    minutes, and silver's for the minutes after gold's last (the gold job writes a minute
    late, once final; a report right after an incident would end before it).
    `with_silver(gold=...)` is the statement with the silver minutes."""
    have_gold = _exists(spark, gold_table)
    if all(_exists(spark, t) for t in silver_tables):
        rows = run_query(spark, with_silver(gold=have_gold))
        return rows, {s for v in rows.column("source") for s in v.split(" + ")}
    if have_gold:
        rows = run_query(spark, gold_sql)
        return rows, {"gold"} if rows.rows else set()
    return Query(gold_sql), set()


def _offsets_source(what: str, rows: Query, sources: set[str], gold_table: str,
                    silver_text: str, silver_tables: tuple[str, ...],
                    notes: list[str]) -> tuple[str, str]:
    """The chart's `source` and the note on the minutes silver filled in ("" if none);
    the note goes to the report's notes too, after `what` ("the lag of g on t-0")."""
    silver = " + ".join(silver_tables)
    if sources == {"silver"}:
        source, note = silver, f"{gold_table} has no rows in this window: {silver_text}"
    elif "silver" in sources:
        last_gold = max(t for t, s in zip(rows.column("t_ms"), rows.column("source"))
                        if "gold" in s.split(" + "))
        source = f"{gold_table} + {silver}"
        note = (f"{gold_table} has rows up to {utc(last_gold)} here (the gold job writes its "
                f"minutes late); the minutes after its last are {silver_text} (source: silver)")
    else:
        return gold_table, ""
    notes.append(f"{what[:1].upper()}{what[1:]}: {note}.")
    return source, note


def _group_section(spark, cluster: str, group: str, topic: str, partition: int,
                   start_ms: int, end_ms: int, markers: tuple[Marker, ...],
                   notes: list[str]) -> GroupSection:
    attrs = {"cluster": cluster, "group": group, "topic": topic, "partition": str(partition)}
    key = (cluster, group, topic, partition, start_ms, end_ms)
    what = f"{group} on {topic}-{partition}"
    commits, commit_sources = _offset_rows(
        spark, q.committed_offsets(*key),
        lambda gold: q.committed_offsets_with_silver(*key, gold=gold), q.COMMITS_1M,
        (q.COMMITS_SILVER,))
    commits_source, commits_note = _offsets_source(
        f"the commits of {what}", commits, commit_sources, q.COMMITS_1M,
        f"computed from the commits of {q.COMMITS_SILVER}", (q.COMMITS_SILVER,), notes)
    lag, lag_sources = _offset_rows(
        spark, q.lag(*key), lambda gold: q.lag_with_silver(*key, gold=gold), q.LAG_1M,
        (q.ENDS_SILVER, q.COMMITS_SILVER))
    lag_source, lag_note = _offsets_source(
        f"the lag of {what}", lag, lag_sources, q.LAG_1M,
        f"computed from the end offsets of {q.ENDS_SILVER} and the commits of "
        f"{q.COMMITS_SILVER}", (q.ENDS_SILVER, q.COMMITS_SILVER), notes)
    if _exists(spark, q.COMMITS_SILVER):
        rewinds_source = f"{q.COMMITS_SILVER} (every commit)"
        rewinds = run_query(spark, q.rewinds_silver(cluster, group, topic, partition,
                                                    start_ms, end_ms))
    else:
        rewinds_source = f"{q.COMMITS_1M} (per minute: from the previous minute's last commit)"
        rewinds = Query(q.rewinds_gold(cluster, group, topic, partition, start_ms, end_ms))
        if _exists(spark, q.COMMITS_1M):
            rewinds = run_query(spark, rewinds.sql)
    rewind_markers = tuple(Marker(int(r["t_ms"]), f"rewind {r['from_offset']} → "
                                                  f"{r['to_offset']}", "rewind")
                           for r in rewinds.records()[:MAX_MARKERS])
    charts = (
        Chart(kind="offsets", title=f"{what}: committed offset",
              query=commits, series=(Series("last_offset", "last commit of the minute",
                                            emphasis=True),
                                     Series("min_offset", "lowest commit of the minute")),
              unit="offset", attrs=attrs, source=commits_source, zero_based=False,
              note="; ".join(n for n in ("a lowest commit below the line before it is a "
                                         "rewind", commits_note) if n),
              markers=markers + rewind_markers),
        Chart(kind="lag", title=f"{what}: lag", query=lag,
              series=(Series("lag", "lag (end offset − committed offset)", emphasis=True),),
              unit="messages", attrs=attrs, source=lag_source, note=lag_note,
              markers=markers),
    )
    return GroupSection(cluster, group, topic, partition, charts, rewinds, rewinds_source)


def _groups_to_show(spark, findings: list[Finding], start_ms: int, end_ms: int,
                    notes: list[str]) -> list[tuple[str, str, str, int]]:
    named = sorted(involved_groups(findings))
    found: list[tuple[str, str, str, int]] = []
    if _exists(spark, q.COMMITS_1M):
        for cluster, topic, partition in sorted(involved_partitions(findings)):
            rows = run_query(spark, q.partition_groups(cluster, topic, partition, start_ms,
                                                       end_ms, GROUPS_PER_PARTITION))
            found += [(cluster, g, topic, partition) for g in rows.column("group_id")]
    out = list(dict.fromkeys(named + found))
    if len(out) > MAX_GROUPS:
        notes.append(f"{len(out)} group/partition pairs are involved; the first {MAX_GROUPS} "
                     f"are shown (named by a finding first)")
    return out[:MAX_GROUPS]


def build_report(spark, lake: Lake, *, incident_id: str | None = None,
                 start_ms: int | None = None, end_ms: int | None = None,
                 cluster: str | None = None, margin_ms: int = DEFAULT_MARGIN_MS,
                 now_ms: int | None = None) -> ReportData:
    """The report of one incident (its id or any member finding's id) or of a time range."""
    if (incident_id is None) == (start_ms is None and end_ms is None):
        raise ValueError("give either incident_id or start_ms and end_ms")
    if incident_id is None and (start_ms is None or end_ms is None or end_ms <= start_ms):
        raise ValueError("a range needs start_ms < end_ms")
    register_tables(spark, lake)
    if not _exists(spark, q.ANOMALIES):
        raise ReportError(f"no {q.ANOMALIES} table under {lake.root}: no findings recorded yet")
    where = (q.incident_filter(incident_id) if incident_id is not None
             else q.range_filter(start_ms, end_ms, cluster))
    rows = run_query(spark, q.findings(where))
    findings = [Finding.from_row(r) for r in rows.records()]
    if incident_id is not None:
        if not findings:
            raise ReportError(f"no finding with incident_id or finding_id {incident_id!r} in "
                              f"{q.ANOMALIES}")
        start_ms = min(f.first_seen_ms for f in findings) - margin_ms
        end_ms = max(f.last_seen_ms for f in findings) + margin_ms
        title = f"kmon incident {incident_id}"
    else:
        title = "kmon findings in a time range"
    summary = run_query(spark, q.summary(where))

    row_of = {r["finding_id"]: tuple(r.values()) for r in rows.records()}
    chain = tuple(ChainLink(f, cause, depth, Query(q.finding(f.finding_id), rows.columns,
                                                   (row_of[f.finding_id],)))
                  for f, cause, depth in causal_order(findings))

    notes: list[str] = []
    brokers = sorted(involved_brokers(findings).items())
    if len(brokers) > MAX_BROKERS:
        notes.append(f"{len(brokers)} brokers are involved; the first {MAX_BROKERS} by id "
                     f"are shown")
    broker_sections = tuple(
        dataclasses.replace(
            _broker_section(spark, c, b, apis, start_ms, end_ms, _finding_markers(findings, c),
                            notes),
            **_slow_requests(findings, c, b))
        for (c, b), apis in brokers[:MAX_BROKERS])
    group_sections = tuple(
        _group_section(spark, c, g, t, p, start_ms, end_ms, _finding_markers(findings, c),
                       notes)
        for c, g, t, p in _groups_to_show(spark, findings, start_ms, end_ms, notes))
    for table in (q.STAGES_1M, q.STAGES_SILVER, q.COMMITS_1M, q.LAG_1M, q.COMMITS_SILVER,
                  q.ENDS_SILVER):
        if not _exists(spark, table):
            notes.append(f"{table} does not exist under {lake.root}")
    return ReportData(
        title=title, incident_id=incident_id, start_ms=start_ms, end_ms=end_ms,
        generated_ms=now_ms if now_ms is not None else int(time.time() * 1000),
        summary=summary, chain=chain, brokers=broker_sections, groups=group_sections,
        notes=tuple(notes))
