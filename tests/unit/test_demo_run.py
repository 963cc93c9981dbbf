"""bench/demo_run.py: the figures it reads from a demo's summary and kmon log."""

from bench.demo_run import summarize

SUMMARY = {"healthy_findings": [], "faults": [
    {"fault": "slow_broker", "detected": True, "time_to_detect_s": 41.1,
     "findings": [{"type": "slow_broker", "entity": "broker:2", "cause": "slow_follower"}]},
    {"fault": "unclean_election", "detected": False, "time_to_detect_s": None,
     "findings": []}]}
LOG = [
    "2026-11-30 13:09:50,161 INFO jobs.silver: silver batch 0: 5439 rows of 9 streams in "
    "9.9 s (read 1.3, streams 0.2, silver 7.9)",
    "2026-11-30 13:10:02,492 INFO jobs.silver: silver batch 1: 2515 rows of 8 streams in "
    "2.5 s (read 0.8)",
    "2026-11-30 13:10:03,000 INFO jobs.silver_slow: something else 99 rows",
    "2026-11-30 13:10:10,383 INFO evaluation.detect: detectors at 1796044587690: 1 detections, "
    "1 findings (1 open), 1 rows written in 4.6 s (assessed in 3.0 s, handed over in 0.1 s, "
    "written in 1.5 s); inputs {}; reads (s) {}",
]


def test_fault_times_batches_and_evaluations():
    out = summarize(SUMMARY, LOG)
    assert [(f["fault"], f["detected"], f["time_to_detect_s"]) for f in out["faults"]] == [
        ("slow_broker", True, 41.1), ("unclean_election", False, None)]
    assert out["faults"][0]["findings"] == [("slow_broker", "broker:2", "slow_follower")]
    assert out["silver_batch_s"] == {"n": 2, "mean": 6.2, "p50": 9.9, "max": 9.9}
    assert out["silver_rows_per_batch"]["mean"] == 3977.0
    assert out["evaluation_s"] == {"n": 1, "mean": 4.6, "p50": 4.6, "max": 4.6}


def test_a_log_without_the_lines_gives_empty_figures():
    out = summarize({"faults": []}, ["nothing here"])
    assert out["silver_batch_s"] == {"n": 0} and out["evaluation_s"] == {"n": 0}
