"""kmon's Grafana dashboards as code (grafana-foundation-sdk, built for Grafana 11.6).

One module per dashboard (fleet_overview, broker_drilldown, consumer_groups, log_cleaner,
pipeline_health); build.py builds them all, writes them for file provisioning
(dashboards/generated/, never edited by hand) or pushes them over Grafana's HTTP API.
Metric names live in metric_names.py, the shared variables and selectors in variables.py,
the labels Prometheus must add to broker targets in prometheus_scrape.py, and queries.py
turns every panel query into plain PromQL for tests against a real Prometheus.
"""
