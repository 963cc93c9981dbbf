"""Which slow-broker mechanisms the recorded corpus needs: each switched off in turn.

Run `kmon matrix replay` once (it keeps each evaluation's inputs), then:

    .kmon/venv/bin/python -m bench.rule_ablation                  # each mechanism alone
    .kmon/venv/bin/python -m bench.rule_ablation margin+pools     # some together

For each ablation: the corpus rescored over the kept inputs with that mechanism off (rules
only, no Spark, ~30 s of CPU), how many recordings still pass, and per recording that
hands over anything different, what was lost and what came instead (first handed over,
type, entity, cause, severity). A mechanism whose ablation changes nothing is one the
corpus does not exercise: a candidate to fold into another, or a case the corpus lacks.
Writes bench/results/rule-ablation-<stamp>.json.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import Callable
from unittest import mock

from bench.result_file import machine_header, save
from bench.rescore_parity import FIELDS

D, B, P = ("detectors.slow_broker.detect", "detectors.slow_broker.blame",
           "detectors.slow_broker.persistence")
E, R = "detectors.explaining_away", "detectors.slow_broker.rules"


def _patches() -> dict[str, tuple[str, Callable[..., list]]]:
    """Name -> (what it switches off, the patches that do it)."""
    import detectors.slow_broker.blame as blame
    from detectors.explaining_away import Blame
    import core.disruptions as disruptions
    import detectors.slow_broker.excuses as excuses
    import detectors.slow_broker.persistence as persistence

    def no_shrinks(by_leader, shrinks=(), not_by_margin=()):
        return blame.replication_waits(by_leader, (), not_by_margin)

    def no_outages(outages=(), starts=()):
        return disruptions.disruptions_from((), starts)

    attribute_replication = blame.attribute_replication

    def no_follower(broker, _blame):
        return attribute_replication(broker, Blame(None, False, None, None))

    def nothing_before(brokers, active, waits, followers_seen, _before):
        return excuses.explain(brokers, active, waits, followers_seen, set())

    return {
        "corroboration": ("rules 2b/4b: a follower late everywhere as a second sign",
                          lambda: [mock.patch(f"{R}.corroborated", lambda *_: False)]),
        "risen": ("brokers risen past half the history bar count toward cluster-wide",
                  lambda: [mock.patch(f"{D}.risen", lambda *_: False)]),
        "culprit_explains_rise": ("a culprit follower explains its leaders' rise",
                                  lambda: [mock.patch(f"{D}.waits_on_culprit",
                                                      lambda *_: False)]),
        "quiet_slow": ("quiet brokers slow in their own stages count toward cluster-wide",
                       lambda: [mock.patch(f"{D}.quiet_but_slow", lambda *_: set())]),
        "margin": ("the worst follower at every leader by a margin is late",
                   lambda: [mock.patch(f"{E}.worst_everywhere", lambda *_: False)]),
        "stands_out": ("a follower late by peer_ratio over the leader's other followers",
                       lambda: [mock.patch(f"{E}.stands_out", lambda *_: False)]),
        "server_explains": ("a leader every follower waits on but no other leader",
                            lambda: [mock.patch(f"{E}.server_explains", lambda *_: False)]),
        "follower_memory": ("a follower that stopped fetching held its leader back",
                            lambda: [mock.patch(f"{B}.FOLLOWER_MEMORY_WINDOWS", 0)]),
        "shrinks": ("ISR shrinks name a follower",
                    lambda: [mock.patch(f"{D}.replication_waits", no_shrinks)]),
        "pools": ("a strong pooled verdict counts for its earlier windows",
                  lambda: [mock.patch(f"{P}.strong_pool", lambda _v: 1)]),
        "strongest": ("the finding names the strongest cause that persisted (off: the newest)",
                      lambda: [mock.patch(f"{P}.strongest", lambda recent, broker, _c: [
                          a for a in recent if broker in persistence.flagged(a)][-1])]),
        "blamed_before": ("a broker blamed before a disruption is no victim of it",
                          lambda: [mock.patch(f"{D}.explain", nothing_before)]),
        "outages": ("the outage rows of the known-disruption table",
                    lambda: [mock.patch(f"{D}.disruptions_from", no_outages)]),
        "follower_blame": ("a leader's acks=all wait explained by a follower",
                           lambda: [mock.patch(f"{B}.attribute_replication", no_follower)]),
        "margin_guard": ("a warming broker is not named by margin alone",
                         lambda: [mock.patch(f"{D}.not_named_by_margin",
                                             lambda _a: frozenset())]),
    }


def handed_over(config, root) -> dict:
    from matrix.corpus import recordings, rescore
    out = {}
    for rec in recordings():
        sc, seen = rescore(config, rec, root)
        out[rec.scenario] = {"passed": sc.passed,
                             "seen": [[t, {k: d.get(k) for k in FIELDS}] for t, d in seen]}
    return out


def _brief(seen: list) -> list[tuple]:
    return [(t, d["type"], d["entity"], d["cause"], d["severity"]) for t, d in seen]


def compare(base: dict, after: dict) -> dict:
    changed = {}
    for name, b in base.items():
        a = after[name]
        if a == b:
            continue
        before, now = _brief(b["seen"]), _brief(a["seen"])
        changed[name] = {"passed": a["passed"], "lost": [x for x in before if x not in now],
                         "gained": [x for x in now if x not in before]}
    return changed


def main(argv: list[str]) -> int:
    from kmon.config import load_config

    config = load_config()
    root = config.work_dir / "matrix-replay"
    patches = _patches()
    runs = argv or list(patches)
    unknown = {p for r in runs for p in r.split("+")} - set(patches)
    if unknown:
        print(f"unknown ablation(s) {sorted(unknown)}; known: {sorted(patches)}",
              file=sys.stderr)
        return 2
    base = handed_over(config, root)
    doc = {**machine_header("rule ablation", "bench.rule_ablation", argv),
           "recordings": len(base), "passed": sum(v["passed"] for v in base.values()),
           "ablations": []}
    print(f"all mechanisms: {doc['passed']}/{len(base)} recordings pass")
    for run in runs:
        with ExitStack() as stack:
            for part in run.split("+"):
                for p in patches[part][1]():
                    stack.enter_context(p)
            after = handed_over(config, root)
        changed = compare(base, after)
        passed = sum(v["passed"] for v in after.values())
        doc["ablations"].append({"off": run, "what": [patches[p][0] for p in run.split("+")],
                                 "passed": passed, "changed": changed})
        failed = sorted(n for n, c in changed.items() if not c["passed"])
        print(f"{run:<40} {passed}/{len(after)} pass, {len(changed)} hand over otherwise"
              + (f"; fail: {', '.join(failed)}" if failed else ""))
    save("rule-ablation", doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
