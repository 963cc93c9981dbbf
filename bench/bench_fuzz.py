"""A long fuzz run: every edge parser's property for minutes, with fresh seeds.

Run: .kmon/venv/bin/python -m bench.bench_fuzz --minutes-per-parser 5

The properties are tests/unit/test_parser_fuzz.py's (`PROPERTIES`: a parser never raises,
returns a record, a `Malformed` or a `Skipped`, and every record passes its table's checks
with the integer widths on). CI runs each on a fixed profile and a few thousand inputs of
one fresh seed; this gives each a time budget instead. Within the budget a property runs
in batches of `--batch` inputs, each batch on its own seed drawn from the run's seed, so
a failure names the seed that replays it: ``--replay <seed> --only <property>`` (same
``--batch``) runs that one batch and shows hypothesis's falsifying input. A batch that
fails is counted and the run goes on with the next seed.

It prints per property the inputs run, the batches, the failures and their seeds, and
writes the same to bench/results/fuzz-<UTC stamp>.json. An input a long run finds joins
the property's fixed examples once the parser is fixed.
"""

from __future__ import annotations

import argparse
import random
import time
import traceback

from bench.result_file import machine_header, save

MODULE = "bench.bench_fuzz"


def run_property(prop, budget_s: float, batch: int, rng: random.Random) -> dict:
    """Batches of `prop` with seeds from `rng` until `budget_s` has passed."""
    examples = 0

    def count() -> None:
        nonlocal examples
        examples += 1

    failures, batches = [], 0
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline:
        seed = rng.randrange(2 ** 32)
        test = prop.hypothesis_test(fresh_seed=seed, max_examples=batch, on_example=count)
        batches += 1
        try:
            test()
        except Exception as e:  # noqa: BLE001 - a failing batch is the finding, not the end
            failures.append({"seed": seed, "error": f"{type(e).__name__}: {e}"[:2000],
                             "where": traceback.format_exc(limit=3)[-2000:]})
            print(f"  {prop.name}: FAILED with seed {seed}: {type(e).__name__}")
    return {"examples": examples, "batches": batches, "seconds": round(budget_s, 1),
            "failures": len(failures), "failing_seeds": [f["seed"] for f in failures],
            "failure_details": failures}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes-per-parser", type=float, default=5.0,
                    help="time budget of each property, minutes")
    ap.add_argument("--batch", type=int, default=2000,
                    help="inputs per seed (a failing batch is replayed with its seed)")
    ap.add_argument("--seed", type=int, default=None,
                    help="the run's seed (default: a new one), from which batch seeds are drawn")
    ap.add_argument("--only", nargs="*", default=None,
                    help="property names to run (default: all)")
    ap.add_argument("--replay", type=int, default=None,
                    help="run one batch of this seed per property and show its failure")
    args = ap.parse_args(argv)

    from tests.unit.test_parser_fuzz import PROPERTIES  # builds the fixture samples

    if args.replay is not None:
        for prop in PROPERTIES:
            if not args.only or prop.name in args.only:
                prop.hypothesis_test(fresh_seed=args.replay, max_examples=args.batch)()
                print(f"{prop.name}: batch {args.replay} passes")
        return

    run_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2 ** 32)
    rng = random.Random(run_seed)
    print(f"fuzz run seed {run_seed}; {args.minutes_per_parser:g} min per property, "
          f"batches of {args.batch}")
    doc = {**machine_header("fuzz", MODULE, argv), "seed": run_seed, "batch": args.batch,
           "minutes_per_parser": args.minutes_per_parser, "properties": {}}
    for prop in PROPERTIES:
        if args.only and prop.name not in args.only:
            continue
        result = run_property(prop, args.minutes_per_parser * 60, args.batch, rng)
        doc["properties"][prop.name] = result
        print(f"{prop.name:36s} {result['examples']:>9,} inputs {result['batches']:>4} batches "
              f"{result['failures']:>3} failures {result['failing_seeds'] or ''}")
    doc["examples"] = sum(p["examples"] for p in doc["properties"].values())
    doc["failures"] = sum(p["failures"] for p in doc["properties"].values())
    print(f"total: {doc['examples']:,} inputs, {doc['failures']} failures")
    save("fuzz", doc)


if __name__ == "__main__":
    main()
