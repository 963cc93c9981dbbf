"""`kmon matrix run`'s result file (matrix/command.py): saved after every scenario, so a run
cut short keeps what it did, and `--resume` runs the rest into the same file.

The live part (clusters, faults) is `matrix.live.run_matrix`; here it is replaced by a
stand-in that scores each scenario it is given and stops after `stop_after`, as a session
ended by Ctrl-C or a closing sitting does: what is checked is the bookkeeping."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

import matrix.live
from matrix import command, results
from matrix.scenarios import catalog
from matrix.score import ExpectScore, ScenarioScore


class _Result:
    def __init__(self, name: str, fault_class: str):
        self.score = ScenarioScore(name, fault_class, [ExpectScore(
            part="p", found=True, cause_ok=True, severity_ok=True, seconds=12.0)])

    def to_json(self) -> dict:
        return {**self.score.to_json(), "topology": "3b-1c"}


@pytest.fixture
def live(monkeypatch, tmp_path):
    ran: list[list[str]] = []
    state = {"stop_after": None}

    def run_matrix(config, scenarios, *, on_result, **_):
        ran.append([s.name for s in scenarios])
        for i, s in enumerate(scenarios):
            if state["stop_after"] is not None and i == state["stop_after"]:
                return
            on_result(_Result(s.name, s.fault_class))

    monkeypatch.setattr(matrix.live, "run_matrix", run_matrix)
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    return ran, state


def test_a_cut_run_keeps_its_scenarios_and_resume_runs_only_the_rest(live, tmp_path,
                                                                     monkeypatch):
    ran, state = live
    names = [s.name for s in catalog()][:5]
    state["stop_after"] = 2
    heads = iter(["c0ffee1", "beef002", "d00d003"])
    monkeypatch.setattr(results, "commit", lambda: next(heads))
    out = io.StringIO()
    assert command.run(SimpleNamespace(work_dir=tmp_path), names, record=False, port=0, command="kmon matrix run x",
                       out=out) == 1
    [path] = tmp_path.glob("matrix-live-*.json")
    doc = json.loads(path.read_text())
    assert doc["complete"] is False and doc["asked"] == names
    assert [r["scenario"] for r in doc["scenarios"]] == names[:2]
    assert f"--resume {path}" in out.getvalue()

    state["stop_after"] = None
    assert command.run(SimpleNamespace(work_dir=tmp_path), ["ignored-on-resume"], record=False, port=0,
                       command="kmon matrix run y", resume=path, out=io.StringIO()) == 0
    assert ran == [names, names[2:]]
    doc = json.loads(path.read_text())
    assert doc["complete"] is True and doc["command"] == "kmon matrix run x"
    assert [r["scenario"] for r in doc["scenarios"]] == names
    assert [len(r["scenarios"]) for r in doc["runs"]] == [5, 3]
    assert list(tmp_path.glob("matrix-live-*.json")) == [path]
    # Each run keeps the commit it started at (HEAD read once, at its start: commits made
    # while a run of hours goes on are not what it ran), and so does each of its rows.
    assert [r["commit"] for r in doc["runs"]] == ["c0ffee1", "beef002"]
    assert doc["commit"] == "beef002"
    newest = results.newest("live", tmp_path)
    assert {r["scenario"] for r in newest["scenarios"]} == set(names)
    assert [r["run"]["commit"] for r in newest["scenarios"]] == ["c0ffee1"] * 2 + ["beef002"] * 3
    assert [r["commit"] for r in newest["runs"]] == ["c0ffee1", "beef002"]


def test_resume_refuses_a_file_that_is_not_a_live_result(live, tmp_path):
    bad = tmp_path / "matrix-replay-x.json"
    bad.write_text(json.dumps({"mode": "replay", "scenarios": []}))
    out = io.StringIO()
    assert command.run(SimpleNamespace(work_dir=tmp_path), None, record=False, port=0, command="c", resume=bad, out=out) == 2
    assert "not a live matrix result" in out.getvalue()
    out = io.StringIO()
    assert command.run(SimpleNamespace(work_dir=tmp_path), None, record=False, port=0, command="c",
                       resume=tmp_path / "missing.json", out=out) == 2
    assert "missing.json" in out.getvalue()


def test_each_topology_runs_on_a_lake_of_its_own():
    """A stopped query's checkpoint may still be written by the run's Spark session after
    the next topology's preflight cleared the demo folder: each topology's queries keep
    their checkpoints under a lake of their own, never the one the demo or another
    topology used."""
    from kmon.config import load_config
    from demo.settings import demo_config
    from infra.lake import Lake
    from matrix.scenarios import DEDICATED, FIVE, THREE

    config = load_config()
    configs = {t.name: matrix.live.topology_config(config, t) for t in (THREE, FIVE, DEDICATED)}
    checkpoints = {Lake(c.storage_root).checkpoint("silver") for c in configs.values()}
    assert len(checkpoints) == 3
    assert Lake(demo_config(config).storage_root).checkpoint("silver") not in checkpoints
    assert configs["5b-3c"].local_cluster.brokers == 5
    assert configs["3b+1dc"].local_cluster.dedicated_controllers == 1


def test_resume_refuses_a_run_whose_detection_code_changed(live, tmp_path, monkeypatch):
    """An acceptance run spanning sittings counts only if every part ran the same rules:
    a resume at another rules version is refused, naming both versions."""
    ran, state = live
    names = [s.name for s in catalog()][:3]
    state["stop_after"] = 1
    monkeypatch.setattr(results, "rules_version", lambda root=None: "aaaaaaaaaaaa")
    command.run(SimpleNamespace(work_dir=tmp_path), names, record=False, port=0,
                command="c", out=io.StringIO())
    [path] = tmp_path.glob("matrix-live-*.json")
    assert [r["rules"] for r in json.loads(path.read_text())["runs"]] == ["aaaaaaaaaaaa"]
    monkeypatch.setattr(results, "rules_version", lambda root=None: "bbbbbbbbbbbb")
    out = io.StringIO()
    assert command.run(SimpleNamespace(work_dir=tmp_path), None, record=False, port=0,
                       command="c", resume=path, out=out) == 2
    assert "aaaaaaaaaaaa" in out.getvalue() and "bbbbbbbbbbbb" in out.getvalue()
    assert len(ran) == 1
    monkeypatch.setattr(results, "rules_version", lambda root=None: "aaaaaaaaaaaa")
    state["stop_after"] = None
    assert command.run(SimpleNamespace(work_dir=tmp_path), None, record=False, port=0,
                       command="c", resume=path, out=io.StringIO()) == 0
    doc = results.render_doc(results.newest("live", tmp_path), None, [])
    assert "rules aaaaaaaaaaaa" in doc and "across these runs: yes." in doc


def test_the_rules_version_follows_the_detection_code_and_nothing_else(tmp_path):
    for part in results.DETECTION_CODE:
        f = tmp_path / part if part.endswith(".py") else tmp_path / part / "x.py"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("A = 1\n")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "b.py").write_text("B = 1\n")
    before = results.rules_version(tmp_path)
    (tmp_path / "bench" / "b.py").write_text("B = 2\n")
    assert results.rules_version(tmp_path) == before
    (tmp_path / "detectors" / "x.py").write_text('"""Prose."""\n\nA = (  # a comment\n    1)\n')
    assert results.rules_version(tmp_path) == before   # prose and layout are not code
    (tmp_path / "detectors" / "x.py").write_text("A = 2\n")
    assert results.rules_version(tmp_path) != before


def test_first_tries_are_each_scenarios_oldest_live_result(tmp_path):
    def write(stamp, rows):
        (tmp_path / f"matrix-live-{stamp}.json").write_text(json.dumps(
            {"mode": "live", "command": "c", "date": stamp, "commit": f"c{stamp[-1]}",
             "scenarios": [{"scenario": n, "fault_class": "rewind", "passed": p,
                            "error": e} for n, p, e in rows]}))
    write("20260101T000001", [("a", False, None), ("b", True, None)])
    write("20260102T000002", [("a", True, None), ("c", False, "RuntimeError: not caused")])
    firsts = {x["scenario"]: x for x in results.first_tries(tmp_path)}
    assert (firsts["a"]["passed"], firsts["a"]["commit"]) == (False, "c1")
    assert firsts["c"]["error"] and firsts["b"]["passed"]
    doc = results.render_doc(None, None, [], list(firsts.values()))
    assert "| 20260101T000001 | c1 | 2 | 1/2 | a | - |" in doc
    assert "| 20260102T000002 | c2 | 1 | 0/0 | - | c |" in doc


def test_the_doc_lists_only_the_runs_its_newest_rows_come_from(tmp_path):
    def result(stamp, commit, rules, names):
        return {"mode": "live", "command": f"kmon matrix run {stamp}", "date": stamp,
                "machine": {"cpus": 2},
                "commit": commit, "rules": rules,
                "scenarios": [{"scenario": n, "fault_class": "healthy", "passed": True,
                               "expects": [], "unexplained": []} for n in names]}
    for stamp, commit, rules, names in (("20260101T000000Z", "old0001", "r-old", ["a", "b"]),
                                        ("20260102T000000Z", "new0002", "r-new", ["a", "b"])):
        (tmp_path / f"matrix-live-{stamp}.json").write_text(
            json.dumps(result(stamp, commit, rules, names)))
    newest = results.newest("live", tmp_path)
    assert [r["commit"] for r in newest["runs"]] == ["new0002"]     # the old run is superseded
    assert "across these runs: yes" in results.render_doc(newest, None, [])
