"""The detector registry (detectors/registry.py): each entry's reads are fields the read
side fills and arguments its rules take, its section is a config section, and the loop
runs every entry."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from detectors.registry import DETECTORS, Detector, run_detectors
from evaluation.inputs import DetectorInputs
from kmon.config import Config

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("det", DETECTORS, ids=lambda d: d.name)
def test_an_entrys_reads_are_inputs_and_arguments_of_its_rules(det):
    fields = {f.name for f in dataclasses.fields(DetectorInputs)}
    assert set(det.reads.values()) <= fields
    params = inspect.signature(det.rules).parameters
    named = [p for p in params.values() if p.kind is not p.VAR_KEYWORD]
    first = next(iter(det.reads))
    assert named[0].name == first, "the first read is the rules' positional input"
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    assert takes_any or set(det.reads) <= set(params)
    assert "config" in params and ("now_ms" in params) == det.timed
    assert getattr(Config(), det.section) is not None      # a config section


def test_the_names_are_unique_and_every_detector_is_run():
    assert len({d.name for d in DETECTORS}) == len(DETECTORS)
    calls = []

    def rules(first, *, config, **kw):
        calls.append((first, config, kw))
        return []

    dets = (Detector("a", "slow_broker", {"x": "commits", "y": "elections"}, rules),
            Detector("b", "offset_rewind", {"x": "stage_windows"}, rules, timed=True))
    inputs = DetectorInputs(commits=["c"], elections=["e"], stage_windows=["w"])
    assert run_detectors(inputs, Config(), 7, dets) == []
    assert calls == [(["c"], Config().slow_broker, {"y": ["e"]}),
                     (["w"], Config().offset_rewind, {"now_ms": 7})]
