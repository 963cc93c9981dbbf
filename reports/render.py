"""Render a `ReportData` as one self-contained HTML file.

No server, no network, no JavaScript: CSS is inline, charts are inline SVG drawn by
reports/svg_chart.py, and the SQL and rows under each chart or table sit in a
`<details>` block the browser folds by itself. Everything from the data (topic and group
names, explanations, evidence, SQL) is HTML-escaped, since any of it may come from a
client (a topic named `<script>` is a valid Kafka topic).

Sections: summary, chain of findings (root cause first, each with its explanation,
evidence and suggested action), request stages per broker, committed offset, lag and
rewinds per group and partition, and notes on what was left out or fell back.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from core.findings import Finding
from reports.report_data import BrokerSection, ChainLink, Chart, GroupSection, Query, ReportData
from reports.svg_chart import PALETTE, Line, VLine, esc, format_number, line_chart, utc

MAX_TABLE_ROWS = 500

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;
 margin:0 auto;max-width:980px;padding:16px 24px;background:#fff}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;border-bottom:1px solid #ddd;
 padding-bottom:4px;margin-top:28px}h3{font-size:15px;margin:18px 0 6px}
.kmon-meta{color:#666}
dl.kmon-kv{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;margin:8px 0}
dl.kmon-kv dt{color:#555}dl.kmon-kv dd{margin:0}
.kmon-sev{display:inline-block;padding:0 6px;border-radius:3px;color:#fff;font-size:12px;
 text-transform:uppercase}
.kmon-sev-critical{background:#b00020}.kmon-sev-high{background:#d55e00}
.kmon-sev-warning{background:#b8860b}.kmon-sev-info{background:#607d8b}
ol.kmon-chain{list-style:none;padding:0}
li.kmon-finding{border:1px solid #ddd;border-left:4px solid #999;padding:8px 12px;
 margin:8px 0;border-radius:3px}
li.kmon-finding.kmon-root{border-left-color:#b00020;background:#fff8f8}
.kmon-cause{color:#555;font-size:13px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
td.kmon-num{text-align:right;font-variant-numeric:tabular-nums}
details{margin:6px 0}summary{cursor:pointer;color:#0b5394}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
figure{margin:12px 0}figcaption{font-size:13px;color:#444}
svg.kmon-chart{max-width:100%;height:auto;font-size:11px;font-family:inherit}
svg.kmon-chart .kmon-plot{fill:#fcfcfc;stroke:#ccc}
svg.kmon-chart .kmon-axis line{stroke:#eee}svg.kmon-chart text{fill:#555}
svg.kmon-chart path.kmon-series{stroke-width:1.6;stroke-linejoin:round}
svg.kmon-chart path.kmon-emphasis{stroke-width:2.6}
svg.kmon-chart .kmon-marker{stroke-width:1.2;stroke-dasharray:4 3}
svg.kmon-chart .kmon-marker-finding{stroke:#b00020}
svg.kmon-chart .kmon-marker-rewind{stroke:#0072b2}
ul.kmon-legend{list-style:none;padding:0;margin:2px 0;display:flex;flex-wrap:wrap;gap:4px 14px;
 font-size:12px}
ul.kmon-legend span{display:inline-block;width:14px;height:3px;margin-right:4px;
 vertical-align:middle}
.kmon-note{font-size:12px;color:#666}
"""


# --- small pieces ------------------------------------------------------------------------

def _cell(v: Any) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f'<td class="kmon-num">{esc(format_number(v))}</td>'
    if v is None:
        return "<td>null</td>"
    if isinstance(v, (list, tuple, dict)):
        return f"<td>{esc(json.dumps(v, sort_keys=True, default=str))}</td>"
    return f"<td>{esc(v)}</td>"


def rows_table(query: Query, max_rows: int = MAX_TABLE_ROWS) -> str:
    if not query.columns:
        return '<p class="kmon-note">not run: the table does not exist</p>'
    if not query.rows:
        return '<p class="kmon-note">no rows</p>'
    head = "".join(f"<th>{esc(c)}</th>" for c in query.columns)
    body = "".join("<tr>" + "".join(_cell(v) for v in r) + "</tr>" for r in query.rows[:max_rows])
    more = (f'<p class="kmon-note">{len(query.rows) - max_rows} more rows: run the SQL for '
            f"all of them</p>" if len(query.rows) > max_rows else "")
    return f'<table class="kmon-rows"><tr>{head}</tr>{body}</table>{more}'


def sql_block(query: Query, label: str = "SQL", with_rows: bool = True) -> str:
    """The collapsible block under a chart or table: the statement, then what it returned."""
    rows = rows_table(query) if with_rows else ""
    return (f'<details class="kmon-sql"><summary>{esc(label)}</summary>'
            f'<pre><code class="language-sql">{esc(query.sql)}</code></pre>{rows}</details>')


def severity_badge(severity: str) -> str:
    return f'<span class="kmon-sev kmon-sev-{esc(severity)}">{esc(severity)}</span>'


def _evidence_value(key: str, v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return esc(json.dumps(v, sort_keys=True))
    text = esc(format_number(v))
    if key.endswith("_ms") and isinstance(v, int) and v > 10 ** 11:
        text += f' <span class="kmon-meta">({esc(utc(v))})</span>'
    return text


def evidence_list(evidence: Mapping[str, Any]) -> str:
    if not evidence:
        return ""
    items = "".join(f"<dt>{esc(k)}</dt><dd>{_evidence_value(k, v)}</dd>"
                    for k, v in sorted(evidence.items()))
    return f'<dl class="kmon-kv kmon-evidence">{items}</dl>'


def _finding_name(f: Finding) -> str:
    return f"{f.type.value} {f.entity}"


# --- sections ----------------------------------------------------------------------------

def summary_section(data: ReportData) -> str:
    s = data.summary.records()[0] if data.summary.rows else {}
    root = data.root
    by_id = {c.finding.finding_id: c.finding for c in data.chain}
    roots = [by_id[r] for r in s.get("root_finding_ids") or () if r in by_id]
    root_text = "— (no finding here is an incident's root cause)"
    if root is not None:
        root_text = (f"<strong>{esc(_finding_name(root))}</strong> "
                     f'<span class="kmon-cause">({esc(root.cause)})</span><br>'
                     f"{esc(root.explanation)}")
    if len(roots) > 1:
        root_text += (f'<br><span class="kmon-meta">{len(roots)} incidents in this range; '
                      f"roots: {esc(', '.join(_finding_name(r) for r in roots))}</span>")
    first, last = s.get("first_seen_ms"), s.get("last_seen_ms")
    span = f"{esc(utc(first))} — {esc(utc(last))}" if first is not None else "—"
    items = [
        ("Incident", esc(data.incident_id) if data.incident_id else "— (time range)"),
        ("Root cause", root_text),
        ("Severity", severity_badge(s["worst_severity"]) if s.get("worst_severity") else "—"),
        ("Findings", f"{esc(format_number(s.get('findings', 0)))} "
                     f"({esc(format_number(s.get('open_findings', 0)))} open)"),
        ("Time range", span),
        ("Charts cover", f"{esc(utc(data.start_ms))} — {esc(utc(data.end_ms))}"),
    ]
    kv = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items)
    return (f'<section id="summary" class="kmon-summary"><h2>Summary</h2>'
            f'<dl class="kmon-kv">{kv}</dl>{sql_block(data.summary)}</section>')


def finding_item(link: ChainLink, names: Mapping[str, str]) -> str:
    f = link.finding
    classes = "kmon-finding" + (" kmon-root" if f.is_root_cause else "")
    if link.caused_by is not None:
        origin = f"follows from {names.get(link.caused_by, link.caused_by)}"
    elif f.is_root_cause:
        origin = "root cause"
    elif f.incident_id is not None:
        origin = "part of the incident (its cause is outside this report)"
    else:
        origin = "not linked to other findings"
    times = f"{esc(utc(f.first_seen_ms))} — {esc(utc(f.last_seen_ms))}"
    state = f.status.value + (f", resolved {esc(utc(f.resolved_ms))}" if f.resolved_ms else "")
    return (f'<li class="{classes}" data-finding-id="{esc(f.finding_id)}" '
            f'data-type="{esc(f.type.value)}" data-severity="{esc(f.severity.value)}" '
            f'data-depth="{link.depth}" style="margin-left:{min(link.depth, 6) * 18}px">'
            f"<div>{severity_badge(f.severity.value)} <strong>{esc(_finding_name(f))}</strong>"
            f' <span class="kmon-meta">— {esc(origin)}</span></div>'
            f'<div class="kmon-cause">cause: {esc(f.cause)} · {times} · {esc(state)} · '
            f"cluster {esc(f.cluster)} · finding {esc(f.finding_id)}</div>"
            f"<p>{esc(f.explanation)}</p>"
            f'<div class="kmon-action">Suggested action: '
            f"<strong>{esc(f.suggested_action.value)}</strong></div>"
            f"{evidence_list(f.evidence)}{sql_block(link.query)}</li>")


def chain_section(data: ReportData) -> str:
    names = {c.finding.finding_id: _finding_name(c.finding) for c in data.chain}
    items = "".join(finding_item(link, names) for link in data.chain)
    return (f'<section id="chain" class="kmon-chain-section"><h2>Chain of findings</h2>'
            f'<p class="kmon-meta">Root cause first; each finding follows the one it was '
            f"linked from.</p><ol class=\"kmon-chain\">{items}</ol></section>")


def chart_figure(chart: Chart, data: ReportData) -> str:
    cols = set(chart.query.columns)
    lines = [Line(s.label, s.column, chart.query.points(s.column) if s.column in cols else [],
                  PALETTE[i % len(PALETTE)], s.emphasis)
             for i, s in enumerate(chart.series)]
    svg = line_chart(kind=chart.kind, title=chart.title, lines=lines, start_ms=data.start_ms,
                     end_ms=data.end_ms, unit=chart.unit, attrs=chart.attrs,
                     markers=[VLine(m.t_ms, m.label, m.kind) for m in chart.markers],
                     zero_based=chart.zero_based)
    legend = "".join(
        f'<li><span style="background:{esc(ln.color)}"></span>{esc(ln.label)}'
        f"{'' if any(v is not None for _, v in ln.points) else ' (no data)'}</li>"
        for ln in lines)
    if any(m.kind == "finding" for m in chart.markers):
        legend += ('<li><span style="background:#b00020"></span>finding (dashed)</li>')
    if any(m.kind == "rewind" for m in chart.markers):
        legend += ('<li><span style="background:#0072b2"></span>rewind (dashed)</li>')
    note = f'<p class="kmon-note">{esc(chart.note)}</p>' if chart.note else ""
    return (f'<figure class="kmon-figure" data-kind="{esc(chart.kind)}">'
            f"<figcaption>{esc(chart.title)} "
            f'<span class="kmon-meta">from {esc(chart.source)}</span></figcaption>'
            f'{svg}<ul class="kmon-legend">{legend}</ul>{note}'
            f"{sql_block(chart.query)}</figure>")


SLOW_REQUEST_COLUMNS = (("judged_ms", "judged ms"), ("total_ms", "total"),
                        ("request_queue_ms", "RequestQueue"), ("local_ms", "Local"),
                        ("remote_ms", "Remote"), ("throttle_ms", "Throttle"),
                        ("response_queue_ms", "ResponseQueue"), ("send_ms", "ResponseSend"))


def slow_requests_table(b: BrokerSection) -> str:
    """The slowest requests of the broker's slow-broker findings, one row each."""
    if not b.slow_requests:
        return ""
    head = "".join(f"<th>{esc(label)}</th>" for label in
                   ("time", "API", "client", "correlation id",
                    *(t for _, t in SLOW_REQUEST_COLUMNS), "errors", "kept because"))
    rows = "".join(
        f"<tr><td>{esc(utc(int(r['ts_ms'])))}</td><td>{esc(r.get('api') or '')}</td>"
        f"<td>{esc(r.get('client_id') or '')}</td>{_cell(r.get('correlation_id'))}"
        + "".join(_cell(r.get(k)) for k, _ in SLOW_REQUEST_COLUMNS)
        + f"<td>{esc(', '.join(str(c) for c in r.get('error_codes') or ()))}</td>"
        f"<td>{esc(', '.join(r.get('kept_because') or ()))}</td></tr>"
        for r in b.slow_requests)
    return (f'<h4>Slowest requests <span class="kmon-meta">from the findings\' evidence '
            f"({esc(b.slow_requests_source)}); judged: total, or total − remote for the "
            f"APIs that wait in Remote on purpose</span></h4>"
            f'<table class="kmon-slow-requests"><tr>{head}</tr>{rows}</table>')


def broker_article(b: BrokerSection, data: ReportData) -> str:
    apis = ", ".join(f"{esc(r['api'])} {esc(format_number(r['requests']))}"
                     for r in b.apis.records()) or "none"
    charts = "".join(chart_figure(c, data) for c in b.charts)
    return (f'<article class="kmon-broker" data-cluster="{esc(b.cluster)}" '
            f'data-broker="{b.broker}"><h3>Broker {b.broker} '
            f'<span class="kmon-meta">cluster {esc(b.cluster)}</span></h3>'
            f"<p>Requests in the window by API: {apis}</p>{sql_block(b.apis)}{charts}"
            f"{slow_requests_table(b)}</article>")


def brokers_section(data: ReportData) -> str:
    body = "".join(broker_article(b, data) for b in data.brokers) or \
        '<p class="kmon-note">No broker is named by these findings.</p>'
    return (f'<section id="brokers"><h2>Request stages per broker</h2>{body}</section>')


def group_article(g: GroupSection, data: ReportData) -> str:
    charts = "".join(chart_figure(c, data) for c in g.charts)
    rewinds = g.rewinds.records()
    if rewinds:
        rows = "".join(f"<tr><td>{esc(utc(int(r['t_ms'])))}</td>{_cell(r['from_offset'])}"
                       f"{_cell(r['to_offset'])}{_cell(r['messages_back'])}</tr>"
                       for r in rewinds[:MAX_TABLE_ROWS])
        table = (f'<table class="kmon-rewinds"><tr><th>time</th><th>from offset</th>'
                 f"<th>to offset</th><th>messages back</th></tr>{rows}</table>")
    else:
        table = '<p class="kmon-note">No rewinds in the window.</p>'
    return (f'<article class="kmon-group" data-cluster="{esc(g.cluster)}" '
            f'data-group="{esc(g.group)}" data-topic="{esc(g.topic)}" '
            f'data-partition="{g.partition}"><h3>Group {esc(g.group)} on '
            f"{esc(g.topic)}-{g.partition} "
            f'<span class="kmon-meta">cluster {esc(g.cluster)}</span></h3>{charts}'
            f'<h4>Rewinds <span class="kmon-meta">from {esc(g.rewinds_source)}</span></h4>'
            f"{table}{sql_block(g.rewinds)}</article>")


def groups_section(data: ReportData) -> str:
    body = "".join(group_article(g, data) for g in data.groups) or \
        '<p class="kmon-note">No consumer group or partition is named by these findings.</p>'
    return (f'<section id="groups"><h2>Consumer groups: committed offset, lag and rewinds'
            f"</h2>{body}</section>")


def notes_section(data: ReportData) -> str:
    if not data.notes:
        return ""
    items = "".join(f"<li>{esc(n)}</li>" for n in data.notes)
    return f'<section id="notes"><h2>Notes</h2><ul>{items}</ul></section>'


def render_html(data: ReportData) -> str:
    """The whole report as one HTML document."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(data.title)}</title><style>{CSS}</style></head>"
        f'<body class="kmon-report"><header><h1>{esc(data.title)}</h1>'
        f'<p class="kmon-meta">Generated {esc(utc(data.generated_ms))} by kmon. Every number '
        f"below comes with the Spark SQL that reproduces it (open “SQL”); run it with "
        f"<code>kmon sql</code>.</p></header>"
        f"{summary_section(data)}{chain_section(data)}{brokers_section(data)}"
        f"{groups_section(data)}{notes_section(data)}"
        "</body></html>\n")
