"""The fault matrix: several ways to cause each kind of fault, on several topologies, each
with its ground truth, scored against what kmon finds.

- truth.py      what a scenario's findings must be (and what nothing may add to them)
- score.py      findings against ground truth: detected, type, entity, cause, time, and
                every finding ground truth does not explain
- scenarios.py  the catalog: scenario name, class, topology, mechanism
- mechanisms/   ways to cause faults the demo does not (CPU starvation, seeks, crashes...)
- live.py       `kmon matrix run`: the scenarios on real clusters, recording each one
- corpus.py     a scenario's telemetry as the agents wrote it, and its replay
- results.py    results as data (bench/results/) and the table in docs/matrix.md

The recorded corpus lives in tests/corpus/<scenario>/ and CI replays it.
"""
