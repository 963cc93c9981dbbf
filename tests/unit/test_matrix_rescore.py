"""`kmon matrix rescore`: the detectors run again over the inputs a replay kept, without
Spark, scored like the replay (matrix/corpus.py `rescore`)."""

from __future__ import annotations

import gzip
import pickle

import pytest

from evaluation.inputs import DetectorInputs
from matrix.corpus import (INPUTS_FILE, inputs_fingerprint, recordings, rescore)

pytestmark = pytest.mark.unit


def keep(root, rec, evaluations, fingerprint=None) -> None:
    path = root / rec.scenario / INPUTS_FILE
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wb") as f:
        pickle.dump({"fingerprint": fingerprint or inputs_fingerprint(), "step_s": 20,
                     "evaluations": evaluations}, f)


def evaluations(rec, inputs=DetectorInputs):
    m = rec.manifest
    return [(t, inputs()) for t in range(m["start_ms"] + 20_000, m["end_ms"], 20_000)]


def test_kept_inputs_are_scored_against_the_recordings_truth(kmon_config, tmp_path):
    healthy, fault = recordings(names=["bursty-3b", "freeze-short-3b"])
    for rec in (healthy, fault):
        keep(tmp_path, rec, evaluations(rec))
    score, seen = rescore(kmon_config, healthy, tmp_path)
    assert score.passed and seen == []
    # Inputs with nothing in them: the frozen broker is not found.
    score, seen = rescore(kmon_config, fault, tmp_path)
    assert not score.passed and seen == []
    assert score.failures() == ["slow broker 2: not found"]


def test_inputs_of_another_read_side_or_none_are_refused(kmon_config, tmp_path):
    (rec,) = recordings(names=["bursty-3b"])
    with pytest.raises(ValueError, match="run `kmon matrix replay` first"):
        rescore(kmon_config, rec, tmp_path)
    keep(tmp_path, rec, evaluations(rec), fingerprint="0" * 16)
    with pytest.raises(ValueError, match="read side of another shape"):
        rescore(kmon_config, rec, tmp_path)


def test_a_failed_live_scenario_is_rescored_over_what_its_evaluations_read(kmon_config,
                                                                            tmp_path):
    """A recording of a failed live scenario keeps its live evaluations' inputs (as the
    data had arrived then); rescore reads those before any replay's."""
    from matrix.corpus import Recording, keep_evaluations
    from matrix.live import LiveEvaluations

    (rec,) = recordings(names=["freeze-short-3b"])
    keep(tmp_path / "replays", rec, evaluations(rec), fingerprint="0" * 16)
    live = Recording(tmp_path / "failed" / rec.scenario, rec.manifest)
    live.path.mkdir(parents=True)
    m = rec.manifest
    seen = LiveEvaluations()
    for t, inputs in evaluations(rec):
        seen(t - 600_000, inputs)     # before the scenario: forgotten
        seen(t, inputs)
    seen.forget_before(m["start_ms"])
    kept = seen.span(m["start_ms"], m["end_ms"])
    assert [t for t, _ in kept] == [t for t, _ in evaluations(rec)]
    keep_evaluations(live.path, kept, None)
    score, found = rescore(kmon_config, live, tmp_path / "replays")
    assert score.failures() == ["slow broker 2: not found"] and found == []
    with pytest.raises(ValueError, match="read side of another shape"):
        rescore(kmon_config, rec, tmp_path / "replays")
