"""The request-log windows mode end to end (issue 24): a recorded cluster's real request
logs through the real request-log agent in the windows mode, the landing folder and the
silver query, into the four window tables. What must hold whatever the windows: every
request line is counted in exactly one window row, only OffsetCommit lines still go out
whole, nothing is quarantined, and every exemplar points at a window row."""

from __future__ import annotations

import lzma

import pytest

from matrix.corpus import prepare_replay, recordings

RECORDING = "throttled-cleaner-3b"     # three brokers, one of the corpus's smallest


@pytest.fixture(scope="module")
def lake(spark, kmon_config, tmp_path_factory):
    rec = recordings(names=[RECORDING])[0]
    config = kmon_config.with_overrides(request_log={"mode": "windows"})
    prepared = prepare_replay(spark, config, rec, tmp_path_factory.mktemp("windows"))
    lines = {}
    for node in sorted((rec.path / "raw").glob("node-*")):
        packed = node / "kafka-request.log.xz"
        text = lzma.decompress(packed.read_bytes()) if packed.exists() else b""
        lines[int(node.name.split("-")[1])] = text.count(b"\n")
    return prepared.lake_root, lines


def _silver(spark, root, name):
    return spark.read.format("delta").load(f"{root}/silver/{name}")


def test_every_request_line_is_in_exactly_one_window(spark, lake):
    root, lines = lake
    counted = {r["broker"]: r["n"] for r in _silver(spark, root, "request_windows")
               .groupBy("broker").agg({"requests": "sum"})
               .withColumnRenamed("sum(requests)", "n").collect()}
    assert counted == {b: n for b, n in lines.items() if n}
    assert sum(counted.values()) > 10_000


def test_only_commits_go_out_whole_and_nothing_is_quarantined(spark, lake):
    root, _ = lake
    apis = {r["api"] for r in _silver(spark, root, "request_stages").select("api").distinct()
            .collect()}
    assert apis <= {"OffsetCommit", "TxnOffsetCommit"} and apis
    assert _silver(spark, root, "quarantine").count() == 0


def test_exemplars_and_side_tables_belong_to_their_windows(spark, lake):
    root, _ = lake
    windows = _silver(spark, root, "request_windows").select("record_id")
    exemplars = _silver(spark, root, "request_exemplars")
    assert exemplars.count() > 0
    assert exemplars.join(windows, exemplars.window_id == windows.record_id,
                          "left_anti").count() == 0
    assert _silver(spark, root, "follower_fetch_windows").count() > 0
    assert _silver(spark, root, "client_send_windows").count() > 0
