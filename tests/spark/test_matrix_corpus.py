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

from matrix.corpus import EmptyLakes, recordings, replay_all

STEP_S = 20.0
RECORDINGS = recordings()

# CI runs the replays at the lowest CPU priority beside the other tests (kmonw): while
# those keep both cores busy a replay gets next to nothing, and each test waits for its
# recording's replay, prepared in the background. The default 900 s per test timed out
# there (the 2nd recording, 16 minutes into a CPU-heavy stretch of the other tests), and
# its interruption ended the generator of every replay after it. A hang still fails here,
# at this bound, before CI's own 90-minute limit.
pytestmark = pytest.mark.timeout(3600)

# scenario -> what goes wrong today (a strict xfail: fixing it makes this test say so)
KNOWN_FAILING: dict[str, str] = {}


def _params():
    for r in RECORDINGS:
        marks = ([pytest.mark.xfail(reason=KNOWN_FAILING[r.scenario], strict=True)]
                 if r.scenario in KNOWN_FAILING else [])
        yield pytest.param(r, id=r.scenario, marks=marks)


def test_the_corpus_has_recordings():
    assert RECORDINGS, "tests/corpus/ holds no recordings: run `kmon matrix run`"
    assert set(KNOWN_FAILING) <= {r.scenario for r in RECORDINGS}


@pytest.fixture(scope="module")
def replayed(request, spark, kmon_config, tmp_path_factory):
    """scenario -> (score, seen), or the exception its replay raised: the recordings this
    run selected, replayed in order with the next one prepared while one is scored
    (`replay_all`). Each test waits for its own recording only."""
    selected = [item.callspec.params["rec"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_recorded_scenario_passes"
                and hasattr(item, "callspec")]
    root = tmp_path_factory.mktemp("replays")
    replays = replay_all(spark, kmon_config, selected, root, STEP_S,
                         EmptyLakes(spark, root / "empty-lakes"))
    done: dict = {}

    def get(rec):
        while rec.scenario not in done:
            try:
                r, outcome = next(replays)
            except StopIteration:
                raise RuntimeError(f"no replay of {rec.scenario}: the replays stopped "
                                   "after an earlier test was interrupted (see the first "
                                   "failure)") from None
            done[r.scenario] = outcome
        return done[rec.scenario]

    yield get
    replays.close()


@pytest.mark.parametrize("rec", list(_params()))
def test_recorded_scenario_passes(rec, replayed):
    outcome = replayed(rec)
    if isinstance(outcome, Exception):
        raise outcome
    score, seen = outcome
    assert score.passed, "\n".join(score.failures() + ["seen:"] + [
        f"  {(t - rec.truth.fault_ms) / 1000:+.0f}s {d['severity']} {d['type']} ({d['cause']}) "
        f"{d['entity']}" for t, d in seen])
