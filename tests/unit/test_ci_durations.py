"""bench/ci_durations.py: the whole test run is two pytest processes at once; their JUnit
XML files make one record whose wall time is the longer process's, not the sum."""

from __future__ import annotations

import json

from bench import ci_durations


def _xml(path, wall_s: float, cases: list[tuple[str, str, float]], failures: int = 0):
    rows = "".join(f'<testcase classname="{c}" name="{n}" time="{t}"/>' for c, n, t in cases)
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest" '
                    f'tests="{len(cases)}" failures="{failures}" errors="0" time="{wall_s}">'
                    f'{rows}</testsuite></testsuites>')
    return path


def test_two_processes_at_once_sum_their_tests_and_keep_the_longer_wall(tmp_path, monkeypatch):
    main = _xml(tmp_path / "main.xml", 1500.0, [
        ("tests.integration.test_pipeline", "test_a", 1000.0),
        ("tests.unit.test_rules", "test_b", 100.0),
        ("tests.spark.test_detect", "test_c", 300.0)])
    corpus = _xml(tmp_path / "corpus.xml", 1200.0, [
        ("tests.spark.test_matrix_corpus", "test_one", 700.0),
        ("tests.spark.test_matrix_corpus", "test_two", 480.0)], failures=1)
    monkeypatch.setattr(ci_durations, "ROOT", tmp_path)

    assert ci_durations.main(["--xml", str(main), "--xml", str(corpus), "--label", "t"]) == 0

    out = json.loads(next((tmp_path / "bench" / "results").glob("ci-durations-*.json"))
                     .read_text())
    assert out["wall_s"] == 1500.0
    assert out["tests"] == 5 and out["failures"] == 1
    assert out["tiers"] == {"spark": 1480.0, "integration": 1000.0, "unit": 100.0}
    assert out["files"][:2] == [
        {"file": "tests/spark/test_matrix_corpus.py", "tests": 2, "seconds": 1180.0},
        {"file": "tests/integration/test_pipeline.py", "tests": 1, "seconds": 1000.0}]
    assert [p["wall_s"] for p in out["processes"]] == [1500.0, 1200.0]


def test_a_missing_file_is_named(tmp_path, capsys):
    assert ci_durations.main(["--xml", str(tmp_path / "none.xml")]) == 2
    assert "none.xml" in capsys.readouterr().err
