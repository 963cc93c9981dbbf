"""Where the test run's time goes: seconds per test file and per tier, from the JUnit XML
every `./kmonw test` leaves in .kmon/test-results.xml (pyproject's pytest addopts).

Run: .kmon/venv/bin/python bench/ci_durations.py [--xml FILE ...] [--top 25]
     [--label fresh-clone]

The whole run (`./kmonw test` with no arguments) is two pytest processes at once: the
fault-matrix replays at low priority beside everything else, so by default both XML files
are read (.kmon/test-results.xml and .kmon/test-results-corpus.xml). Their tests' times
add up to more than the run took; the wall time is the longer process's.

Prints the tiers (unit, spark, integration) and the slowest files, and writes the same as
data to bench/results/ci-durations-<utc stamp>.json. A file's time is the sum of its
tests' times as pytest reports them (setup, call and teardown, so a module-scoped cluster
counts in its first test); the run's wall time is pytest's own total. Where the run left
<xml>.cpu.json (tests/conftest.py), each file also has the machine's CPU seconds during
its tests, at normal priority (`cpu_s`: the test and what it started) and niced
(`niced_cpu_s`: in the main process, the replays beside it), and the files are also
listed by CPU. CI must stay under 45
minutes on 2 cores: this is how to see which part to make cheaper.

Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import socket
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def durations(xml_path: Path) -> dict:
    root = ET.parse(xml_path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        raise ValueError(f"{xml_path}: no <testsuite> element (not pytest's JUnit XML?)")
    by_file: dict[str, float] = defaultdict(float)
    tests: dict[str, int] = defaultdict(int)
    for case in suite.iter("testcase"):
        name = (case.get("classname") or "").replace(".", "/") + ".py"
        by_file[name] += float(case.get("time") or 0)
        tests[name] += 1
    cpu: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    cpu_path = xml_path.with_suffix(".cpu.json")
    if cpu_path.is_file():
        for nodeid, spent in json.loads(cpu_path.read_text()).items():
            for k, v in spent.items():
                cpu[nodeid.split("::")[0]][k] += v
    tiers: dict[str, float] = defaultdict(float)
    for name, s in by_file.items():
        parts = name.split("/")
        tiers[parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"] += s
    return {"wall_s": float(suite.get("time") or 0), "tests": int(suite.get("tests") or 0),
            "failures": int(suite.get("failures") or 0) + int(suite.get("errors") or 0),
            "tiers": dict(sorted(tiers.items(), key=lambda x: -x[1])),
            "files": [{"file": f, "tests": tests[f], "seconds": round(s, 1),
                       **{k: round(v, 1) for k, v in cpu.get(f, {}).items()}}
                      for f, s in sorted(by_file.items(), key=lambda x: -x[1])]}


DEFAULT_XML = (ROOT / ".kmon" / "test-results.xml", ROOT / ".kmon" / "test-results-corpus.xml")


def combined(parts: list[dict]) -> dict:
    """The durations of processes that ran at once, as one run: tests, files and tiers
    summed, the wall time the longest process's (each process's kept in `processes`)."""
    tiers: dict[str, float] = defaultdict(float)
    for d in parts:
        for tier, s in d["tiers"].items():
            tiers[tier] += s
    return {"wall_s": max(d["wall_s"] for d in parts),
            "tests": sum(d["tests"] for d in parts),
            "failures": sum(d["failures"] for d in parts),
            "tiers": dict(sorted(tiers.items(), key=lambda x: -x[1])),
            "files": sorted((f for d in parts for f in d["files"]), key=lambda f: -f["seconds"]),
            "processes": [{"xml": d["xml"], "wall_s": d["wall_s"], "tests": d["tests"]}
                          for d in parts]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--xml", type=Path, action="append",
                    help="a pytest JUnit XML file; repeat for processes that ran at once "
                         "(default: .kmon/test-results.xml and, if there, "
                         ".kmon/test-results-corpus.xml)")
    ap.add_argument("--top", type=int, default=25, help="files to print (default 25)")
    ap.add_argument("--label", default="", help="what run this was, kept in the result")
    args = ap.parse_args(argv)
    xmls = args.xml or [DEFAULT_XML[0], *(p for p in DEFAULT_XML[1:] if p.is_file())]
    missing = [p for p in xmls if not p.is_file()]
    if missing:
        print(f"no JUnit XML at {missing[0]}: run ./kmonw test first", file=sys.stderr)
        return 2
    d = combined([{**durations(p), "xml": str(p)} for p in xmls])
    print(f"{d['tests']} tests, {d['failures']} failed, {d['wall_s'] / 60:.1f} min wall"
          + (f" (the longest of {len(xmls)} processes at once)" if len(xmls) > 1 else ""))
    for tier, s in d["tiers"].items():
        print(f"  {tier:12s} {s / 60:6.1f} min")
    print("slowest files:")
    for f in d["files"][:args.top]:
        print(f"  {f['seconds']:7.1f} s  {f['tests']:4d} tests  {f['file']}")
    by_cpu = sorted((f for f in d["files"] if "cpu_s" in f), key=lambda f: -f["cpu_s"])
    if by_cpu:
        print("most CPU (the machine's, normal priority / niced, during the file's tests):")
        for f in by_cpu[:args.top]:
            print(f"  {f['cpu_s']:7.1f} s  {f['niced_cpu_s']:7.1f} s niced  {f['file']}")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = ROOT / "bench" / "results" / f"ci-durations-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"label": args.label, "host": socket.gethostname(),
                               "stamp": stamp, **d}, indent=2))
    print(f"written: {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
