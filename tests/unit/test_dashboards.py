"""kmon's dashboards as code: what every dashboard must have, and that the committed JSON is
exactly what the code builds (so nobody edits generated files by hand).

The PromQL itself is checked against a real Prometheus in
tests/integration/test_dashboard_queries.py; here only the structure and the helpers.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import yaml

from dashboards import build, prometheus_scrape
from dashboards.queries import (UnknownVariable, data_panels, panel_queries,
                                substitute_variables)

# Renaming a uid breaks every link and bookmark to the dashboard: change these on purpose.
EXPECTED_UIDS = ["kmon-fleet-overview", "kmon-broker-drilldown", "kmon-consumer-groups",
                 "kmon-log-cleaner", "kmon-pipeline-health"]


@pytest.fixture(scope="module")
def dashboards():
    return build.build_all()


def _variables(d):
    return {v["name"]: v for v in d["templating"]["list"]}


def test_the_five_dashboards_keep_their_uids(dashboards):
    assert list(dashboards) == EXPECTED_UIDS
    assert all(d["uid"] == uid for uid, d in dashboards.items())


def test_building_twice_gives_the_same_json(dashboards):
    assert {u: build.dashboard_text(d) for u, d in build.build_all().items()} == \
        {u: build.dashboard_text(d) for u, d in dashboards.items()}


def test_committed_generated_json_equals_a_fresh_build(dashboards):
    committed = {p.stem: p.read_text(encoding="utf-8")
                 for p in build.GENERATED_DIR.glob("*.json")}
    fresh = {uid: build.dashboard_text(d) for uid, d in dashboards.items()}
    assert sorted(committed) == sorted(fresh), \
        "dashboards/generated is out of date: run `kmon dashboards` and commit the result"
    for uid in fresh:
        assert committed[uid] == fresh[uid], \
            f"dashboards/generated/{uid}.json differs from the code: run `kmon dashboards`"


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_every_dashboard_has_datasource_cluster_and_broker_variables(dashboards, uid):
    variables = _variables(dashboards[uid])
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["cluster"]["query"].startswith("label_values(")
    assert variables["cluster"]["query"].endswith(", cluster)")
    assert variables["broker"]["query"].startswith("label_values(")
    assert 'cluster=~"$cluster"' in variables["broker"]["query"]
    assert variables["broker"]["query"].endswith(", broker)")
    for name in ("cluster", "broker"):
        assert variables[name]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_broker_drilldown_picks_one_cluster_and_one_broker(dashboards):
    variables = _variables(dashboards["kmon-broker-drilldown"])
    assert not variables["cluster"]["multi"] and not variables["cluster"]["includeAll"]
    assert not variables["broker"]["multi"] and not variables["broker"]["includeAll"]
    overview = _variables(dashboards["kmon-fleet-overview"])
    assert overview["broker"]["multi"] and overview["broker"]["allValue"] == ".*"


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_every_data_panel_has_a_query_on_the_datasource_variable(dashboards, uid):
    panels = data_panels(dashboards[uid])
    assert panels
    for panel in panels:
        targets = panel.get("targets") or []
        assert targets, f"{uid}: panel {panel['title']!r} has no query"
        assert all(t.get("expr") for t in targets), panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        assert len({t["refId"] for t in targets}) == len(targets)


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_panel_ids_are_unique_and_every_panel_has_a_title(dashboards, uid):
    panels = dashboards[uid]["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)) and 0 not in ids
    assert all(p.get("title") for p in panels)


def test_every_broker_metric_is_filtered_by_cluster(dashboards):
    # Broker series come from many clusters; a selector without cluster mixes them.
    selector = re.compile(r"\b(kafka_\w+)\{([^}]*)\}")
    seen = 0
    for d in dashboards.values():
        for panel in data_panels(d):
            for t in panel["targets"]:
                for metric, labels in selector.findall(t["expr"]):
                    seen += 1
                    assert 'cluster=~"$cluster"' in labels, f"{panel['title']}: {metric}"
                bare = re.findall(r"\bkafka_\w+\b(?!\{)", t["expr"])
                assert not bare, f"{panel['title']}: {bare} without a selector"
    assert seen > 50


def test_consumer_groups_says_where_lag_lives_instead_of_inventing_a_metric(dashboards):
    d = dashboards["kmon-consumer-groups"]
    texts = [p for p in d["panels"] if p["type"] == "text"]
    assert len(texts) == 1 and "gold.offset_lag_1m" in texts[0]["options"]["content"]
    assert not any("lag" in expr for _, _, expr in panel_queries(d))


def test_panel_queries_substitute_every_variable(dashboards):
    queries = [q for d in dashboards.values() for q in panel_queries(d)]
    assert len(queries) > 80
    for uid, title, expr in queries:
        assert "$" not in expr and "[[" not in expr, (uid, title, expr)
    one = panel_queries(dashboards["kmon-broker-drilldown"], {"cluster": "c1", "broker": "2"})
    assert any('broker!~"2"' in expr and 'cluster=~"c1"' in expr for _, _, expr in one)


def test_substitute_variables_forms():
    values = {"cluster": "(a|b)", "broker": "1"}
    assert substitute_variables('x{cluster=~"$cluster"}', values) == 'x{cluster=~"(a|b)"}'
    assert substitute_variables('x{b=~"${broker}"}', values) == 'x{b=~"1"}'
    assert substitute_variables('x{b=~"${broker:regex}"}', values) == 'x{b=~"1"}'
    assert substitute_variables('x{b=~"[[broker]]"}', values) == 'x{b=~"1"}'
    assert substitute_variables("rate(x[$__rate_interval])", {}) == "rate(x[1m])"
    assert substitute_variables("increase(x[$__range])", {}) == "increase(x[1h])"
    with pytest.raises(UnknownVariable):
        substitute_variables('x{topic=~"$topic"}', values)


def test_write_all_into_another_folder(tmp_path):
    out = tmp_path / "grafana"
    out.mkdir()
    (out / "kmon-renamed-away.json").write_text("{}")
    (out / "someone-elses.json").write_text("{}")
    written = build.write_all(out)
    names = sorted(p.name for p in written)
    assert names == sorted([f"{u}.json" for u in EXPECTED_UIDS]
                           + [build.PROVIDER_FILE, build.DATASOURCE_FILE])
    assert not (out / "kmon-renamed-away.json").exists()
    assert (out / "someone-elses.json").exists()
    provider = yaml.safe_load((out / "provisioning" / build.PROVIDER_FILE).read_text())
    assert provider["providers"][0]["options"]["path"] == str(out.resolve())
    assert provider["providers"][0]["folder"] == "kmon"
    source = yaml.safe_load((out / "provisioning" / build.DATASOURCE_FILE).read_text())
    assert source["datasources"][0]["type"] == "prometheus"
    d = json.loads((out / "kmon-fleet-overview.json").read_text())
    assert d == build.build_all()["kmon-fleet-overview"]


def test_committed_provisioning_points_at_the_generated_folder():
    provider = yaml.safe_load((build.PROVISIONING_DIR / build.PROVIDER_FILE).read_text())
    assert provider["providers"][0]["options"]["path"].endswith("dashboards/generated")
    source = yaml.safe_load((build.PROVISIONING_DIR / build.DATASOURCE_FILE).read_text())
    assert source["datasources"][0]["jsonData"]["timeInterval"]


def test_main_writes_and_prints_what_it_wrote(tmp_path, capsys):
    assert build.main(tmp_path) == 0
    out = capsys.readouterr().out
    assert out.count("wrote ") == len(EXPECTED_UIDS) + 2
    assert str(tmp_path / "kmon-log-cleaner.json") in out


def test_kafka_scrape_job_labels_every_broker_with_cluster_and_node_id():
    job = prometheus_scrape.kafka_scrape_job(
        "prod-a", {2: "http://10.0.0.2:7071/metrics", 1: "http://10.0.0.1:7071/metrics"})
    assert job["job_name"] == "kafka-prod-a"
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"] == [
        {"targets": ["10.0.0.1:7071"], "labels": {"cluster": "prod-a", "broker": "1"}},
        {"targets": ["10.0.0.2:7071"], "labels": {"cluster": "prod-a", "broker": "2"}}]
    kmon = prometheus_scrape.kmon_scrape_job(["127.0.0.1:9400"])
    assert kmon == {"job_name": "kmon", "static_configs": [{"targets": ["127.0.0.1:9400"]}]}


class _RecordingGrafana(BaseHTTPRequestHandler):
    """Answers the three Grafana HTTP API calls `push` makes and records them.

    Not a Grafana (none is packaged for this machine): it checks the requests kmon sends.
    """
    requests: list = []
    folder_exists = False

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.requests.append((self.command, self.path, self.headers.get("Authorization"), body))
        return body

    def do_GET(self):
        self._record()
        if self.path == "/api/folders/kmon" and type(self).folder_exists:
            self._answer(200, {"uid": "kmon", "title": "kmon"})
        else:
            self._answer(404, {"message": "folder not found"})

    def do_POST(self):
        body = self._record()
        if self.path == "/api/folders":
            type(self).folder_exists = True
            self._answer(200, {"uid": body["uid"], "title": body["title"]})
        elif self.path == "/api/dashboards/db":
            uid = body["dashboard"]["uid"]
            self._answer(200, {"status": "success", "uid": uid, "url": f"/d/{uid}/x"})
        else:
            self._answer(404, {"message": "unexpected"})

    def log_message(self, *args):
        pass


def test_push_creates_the_folder_once_and_overwrites_each_dashboard(dashboards):
    _RecordingGrafana.requests = []
    _RecordingGrafana.folder_exists = False
    server = HTTPServer(("127.0.0.1", 0), _RecordingGrafana)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        assert build.push(url, "secret-token", dashboards) == [f"/d/{u}/x" for u in EXPECTED_UIDS]
        build.push(url, "secret-token", dashboards)  # second run: the folder exists now
    finally:
        server.shutdown()
        server.server_close()
    calls = [(m, p) for m, p, _, _ in _RecordingGrafana.requests]
    assert calls.count(("POST", "/api/folders")) == 1
    assert calls.count(("POST", "/api/dashboards/db")) == 2 * len(EXPECTED_UIDS)
    assert all(auth == "Bearer secret-token" for _, _, auth, _ in _RecordingGrafana.requests)
    posted = [b for m, p, _, b in _RecordingGrafana.requests if p == "/api/dashboards/db"]
    assert [b["dashboard"]["uid"] for b in posted[:5]] == EXPECTED_UIDS
    assert all(b["overwrite"] is True and b["folderUid"] == "kmon" for b in posted)
    assert all(b["dashboard"]["id"] is None for b in posted)


@pytest.mark.parametrize("uid", EXPECTED_UIDS)
def test_panel_titles_are_unique_within_a_dashboard(dashboards, uid):
    # Tests and people name a panel by its title.
    titles = [p["title"] for p in data_panels(dashboards[uid])]
    assert len(titles) == len(set(titles))
