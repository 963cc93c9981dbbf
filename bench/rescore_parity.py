"""What every recording's detectors hand over, as JSON: the parity check of a rule refactor.

Run `kmon matrix replay` once (it keeps each evaluation's inputs), then:

    .kmon/venv/bin/python -m bench.rescore_parity /tmp/before.json     # at the old code
    .kmon/venv/bin/python -m bench.rescore_parity /tmp/after.json      # at the new code
    diff /tmp/before.json /tmp/after.json

Each recording's findings as `kmon matrix rescore` scores them (matrix/corpus.py `rescore`:
every rule, the lifecycle and correlation over the kept inputs, no Spark): first handed over
at, type, entity, cause, severity, the states it went through. An empty diff means the
refactor hands over exactly what it did before on the whole corpus (seconds, not a replay).
"""

from __future__ import annotations

import json
import sys

FIELDS = ("type", "entity", "cause", "severity", "states", "first_seen_ms", "status")


def main(argv: list[str]) -> int:
    from kmon.config import load_config
    from matrix.corpus import recordings, rescore

    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    config = load_config()
    root = config.work_dir / "matrix-replay"
    out = {}
    for rec in recordings():
        sc, seen = rescore(config, rec, root)
        out[rec.scenario] = {"passed": sc.passed, "failures": sc.failures(),
                             "seen": [[t, {k: d.get(k) for k in FIELDS}] for t, d in seen]}
    with open(argv[0], "w") as f:
        json.dump(out, f, indent=1, default=str, sort_keys=True)
    print(f"{len(out)} recordings, {sum(v['passed'] for v in out.values())} passed: {argv[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
