"""The recorded fault matrix, replayed: every scenario scored against its ground truth.

Each recording in tests/corpus/ is the telemetry the agents wrote during one live matrix
scenario (`kmon matrix run`), with its ground truth. Here it goes through the pipeline and
the detectors with no cluster, evaluated every 20 recorded seconds as the live detector
query does, and must pass: every expected finding with the right type, entity, cause and
severity within 60 s of the fault, and no finding the ground truth does not explain. A
rule change that fixes one case and breaks another fails here at once.

`KNOWN_FAILING` lists the scenarios kmon does not pass yet, each with what goes wrong; they
are strict expected failures, so fixing one makes this test say so (move it out of the
list).
"""

from __future__ import annotations

import pytest

from matrix.corpus import EmptyLakes, recordings, replay_scenario

STEP_S = 20.0
RECORDINGS = recordings()

# scenario -> what goes wrong today (issue 23 is open until this is empty)
KNOWN_FAILING: dict[str, str] = {
    "freeze-short-5b": (
        "not found: on this 5-broker cluster (5 broker JVMs and kmon on 2 cores) leader 1's "
        "Produce TP99 was already 330-360 ms before the fault, so its 790-900 ms Remote "
        "wait during the freeze is not slow against its history and follower 2 is never "
        "blamed; broker 2's own Fetch queue time is over 300 ms in one window only (live, "
        "with the warm-up's longer history, it was found in 39 s)"),
}


def _params():
    for r in RECORDINGS:
        marks = ([pytest.mark.xfail(reason=KNOWN_FAILING[r.scenario], strict=True)]
                 if r.scenario in KNOWN_FAILING else [])
        yield pytest.param(r, id=r.scenario, marks=marks)


def test_the_corpus_has_recordings():
    assert RECORDINGS, "tests/corpus/ holds no recordings: run `kmon matrix run`"
    assert set(KNOWN_FAILING) <= {r.scenario for r in RECORDINGS}


@pytest.fixture(scope="module")
def empty_lakes(spark, tmp_path_factory):
    return EmptyLakes(spark, tmp_path_factory.mktemp("empty-lakes"))


@pytest.mark.parametrize("rec", list(_params()))
def test_recorded_scenario_passes(rec, spark, kmon_config, empty_lakes, tmp_path):
    score, seen = replay_scenario(spark, kmon_config, rec, tmp_path / rec.scenario, STEP_S,
                                  empty_lakes)
    assert score.passed, "\n".join(score.failures() + ["seen:"] + [
        f"  {(t - rec.truth.fault_ms) / 1000:+.0f}s {d['severity']} {d['type']} ({d['cause']}) "
        f"{d['entity']}" for t, d in seen])
