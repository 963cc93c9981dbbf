"""Incident reports: one self-contained HTML file per incident (or time range).

`incident.build_report` reads the findings and the gold/silver series behind them with
Spark SQL and keeps every query's text beside its rows; `render.render_html` turns that
into HTML with inline SVG charts and no Spark, network or JavaScript.
"""
