"""Matrix results as data (bench/results/matrix-<mode>-<stamp>.json) and the table in
docs/matrix.md, generated from the newest live and replay results."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

from matrix.score import ExpectScore, ScenarioScore, class_table
from matrix.truth import DETECT_WITHIN_S

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
DOC = REPO / "docs" / "matrix.md"


def machine() -> dict:
    return {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}


def commit() -> str:
    """HEAD's short hash, with "-dirty" when tracked files differ from it (as `git describe
    --dirty`): a run of uncommitted code must not pass for the commit's."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=False).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", "HEAD", "--"],
                               capture_output=True, check=False).returncode == 1
    except OSError:
        return ""
    return f"{head}-dirty" if head and dirty else head


# The code whose change can change a verdict: the shared signal definitions, the detectors
# and their rules, the detector read side, and the edge code that writes what it reads
# (the request windows; the broker-log, client-log and consumer-offsets parsers). A live
# matrix run is at one rules version when all its parts share this hash.
DETECTION_CODE = ("core", "detectors", "evaluation", "infra/lake_sql.py",
                  "ingest/request_windows.py", "ingest/request_window_records.py",
                  "ingest/request_exemplars.py", "ingest/broker_log.py",
                  "ingest/client_log.py", "ingest/consumer_offsets.py")


def _code(source: bytes) -> bytes:
    """A module's code without its prose: the AST with docstrings dropped (comments and
    layout are not in it), so rewording or reflowing text leaves the version as it was."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
            continue
        first = node.body[0] if node.body else None
        if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


def rules_version(root: Path = REPO) -> str:
    """12 hex digits of a SHA-256 over the path and code (`_code`) of every .py file under
    DETECTION_CODE in `root`, as on disk (uncommitted edits count)."""
    import hashlib

    h = hashlib.sha256()
    for part in DETECTION_CODE:
        base = root / part
        files = [base] if base.is_file() else sorted(base.rglob("*.py"))
        for f in files:
            if "__pycache__" in f.parts:
                continue
            h.update(f.relative_to(root).as_posix().encode() + b"\0")
            h.update(_code(f.read_bytes()) + b"\0")
    return h.hexdigest()[:12]


def write(mode: str, command: str, rows: list[dict], scores: list[ScenarioScore],
          out_dir: Path | None = None, *, path: Path | None = None,
          at_commit: str | None = None, **extra) -> Path:
    """rows: one dict per scenario (score + what the mode adds). `path`: rewrite that file
    (a live run saves what it has after each scenario) instead of a new
    matrix-<mode>-<stamp>.json; `at_commit`: the commit the run started at (read once: a
    run of hours outlives commits made meanwhile, and HEAD at a save is not the code that
    ran); `extra`: more top-level keys."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    if path is None:
        out_dir = out_dir or RESULTS_DIR
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"matrix-{mode}-{stamp}.json"
    else:
        stamp = json.loads(path.read_text())["date"] if path.exists() else stamp
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"mode": mode, "command": command, "date": stamp,
                               "commit": commit() if at_commit is None else at_commit,
                               "machine": machine(),
                               # configuration set from the environment (kmon.config)
                               "env": {k: v for k, v in sorted(os.environ.items())
                                       if k.startswith("KMON__")},
                               "detect_within_s": DETECT_WITHIN_S,
                               "classes": class_table(scores), **extra, "scenarios": rows},
                              indent=2, default=str))
    tmp.replace(path)
    return path


def scores_of(rows: list[dict]) -> list[ScenarioScore]:
    """The scores back from result rows (`ScenarioScore.to_json`)."""
    scores = [ScenarioScore(r["scenario"], r["fault_class"]) for r in rows]
    for sc, r in zip(scores, rows):
        sc.expects = [ExpectScore(**{k: v for k, v in e.items() if k != "passed"})
                      for e in r["expects"]]
        sc.unexplained = list(r["unexplained"])
    return scores


def newest(mode: str, out_dir: Path = RESULTS_DIR) -> dict | None:
    """The newest result of every scenario over all runs of this mode, as one run: the
    scenarios in catalog order of their first appearance, each from its newest run (its
    command, date and commit kept on the row), and the runs those rows come from; None
    when there is no run."""
    files = sorted(out_dir.glob(f"matrix-{mode}-*.json"))
    if not files:
        return None
    rows: dict[str, dict] = {}
    files_data = [json.loads(f.read_text()) for f in files]
    for data in files_data:
        parts = _runs_of(data)
        for r in data["scenarios"]:
            # the last run that was to run it: a resumed one reran what the cut one left
            part = next((p for p in reversed(parts) if r["scenario"] in p["scenarios"]),
                        parts[-1])
            rows[r["scenario"]] = {**r, "run": {k: part[k] for k in ("command", "date",
                                                                      "commit", "rules")}}
    last = files_data[-1]
    scores = scores_of(list(rows.values()))
    runs = sorted(dict.fromkeys(tuple(r["run"].items()) for r in rows.values()),
                  key=lambda items: str(dict(items)["date"]))
    return {**last, "scenarios": list(rows.values()), "classes": class_table(scores),
            "runs": [dict(items) for items in runs]}


def first_tries(out_dir: Path = RESULTS_DIR) -> list[dict]:
    """Each scenario's first live result (its oldest run): whether it passed before any
    rule was changed for it, which is how well the rules generalize."""
    seen: dict[str, dict] = {}
    for f in sorted(out_dir.glob("matrix-live-*.json")):
        data = json.loads(f.read_text())
        parts = _runs_of(data)
        for r in data["scenarios"]:
            part = next((p for p in parts if r["scenario"] in p["scenarios"]), parts[-1])
            seen.setdefault(r["scenario"], {"scenario": r["scenario"],
                                            "fault_class": r["fault_class"],
                                            "passed": r["passed"], "error": r.get("error"),
                                            "date": part["date"], "commit": part["commit"]})
    return list(seen.values())


def _runs_of(data: dict) -> list[dict]:
    """The runs that wrote one result file: a resumed live run lists each (its start and
    the commit it started at); any other file is one run."""
    if data.get("runs"):
        return [{"command": data.get("command"),
                 "date": (p.get("started_utc") or "").replace("-", "").replace(":", ""),
                 "commit": p.get("commit"), "rules": p.get("rules"),
                 "scenarios": p.get("scenarios", [])}
                for p in data["runs"]]
    return [{"command": data.get("command"), "date": data.get("date"),
             "commit": data.get("commit"), "rules": data.get("rules"),
             "scenarios": [r["scenario"]
                                                         for r in data["scenarios"]]}]


def console_table(scores: list[ScenarioScore]) -> str:
    lines = [f"{'scenario':28s} {'class':17s} {'result':6s} {'time':>6s}  why"]
    for s in scores:
        t = f"{s.seconds:.0f}s" if s.seconds is not None else "-"
        why = "; ".join(s.failures()) or "-"
        lines.append(f"{s.scenario:28s} {s.fault_class:17s} {'PASS' if s.passed else 'FAIL':6s} "
                     f"{t:>6s}  {why}")
    lines.append("")
    lines.append(f"{'class':17s} {'passed':>9s} {'p50':>6s} {'max':>6s} unexplained")
    for c in class_table(scores):
        p50 = f"{c['p50_s']:.0f}s" if c["p50_s"] is not None else "-"
        mx = f"{c['max_s']:.0f}s" if c["max_s"] is not None else "-"
        lines.append(f"{c['fault_class']:17s} {c['passed']:>4d}/{c['scenarios']:<4d} {p50:>6s} "
                     f"{mx:>6s} {c['unexplained']}")
    return "\n".join(lines)


def _md_rows(data: dict) -> list[str]:
    rows = ["| scenario | class | topology | result | time to detect | of which before the "
            "first window or event counted | before the evaluation that found it began | "
            "what was wrong |",
            "|---|---|---|---|---|---|---|---|"]
    for r in data["scenarios"]:
        t = f"{r['seconds']:.0f} s" if r.get("seconds") is not None else "-"
        why = "; ".join(_failures(r)) or "-"
        rows.append(f"| {r['scenario']} | {r['fault_class']} | {r.get('topology', '-')} | "
                    f"{'pass' if r['passed'] else 'FAIL'} | {t} | "
                    f"{_slowest(r, 'seen_from_s')} | {_slowest(r, 'evaluated_from_s')} | "
                    f"{why.replace('|', '/')} |")
    rows += ["", "| class | passed | p50 | max | unexplained findings |", "|---|---|---|---|---|"]
    for c in data["classes"]:
        p50 = f"{c['p50_s']:.0f} s" if c["p50_s"] is not None else "-"
        mx = f"{c['max_s']:.0f} s" if c["max_s"] is not None else "-"
        rows.append(f"| {c['fault_class']} | {c['passed']}/{c['scenarios']} | {p50} | {mx} | "
                    f"{c['unexplained']} |")
    return rows


def _slowest(r: dict, key: str) -> str:
    """The expectations' largest `key` (seconds from the fault), or "-"."""
    xs = [e.get(key) for e in r["expects"] if e.get(key) is not None]
    return f"{max(0.0, *xs):.0f} s" if xs else "-"


def _failures(r: dict) -> list[str]:
    out = []
    for e in r["expects"]:
        if not e["found"]:
            out.append(f"{e['part']}: not found")
        elif not (e["cause_ok"] and e["severity_ok"]):
            out.append(f"{e['part']}: got {e['got']}")
        elif e["seconds"] is None or e["seconds"] > DETECT_WITHIN_S:
            out.append(f"{e['part']}: {e['seconds']:.0f} s")
    if r.get("error"):
        out.append(f"not caused: {r['error']}")
    return out + [f"unexplained: {u}" for u in r["unexplained"]]


def render_doc(live: dict | None, replay: dict | None, scenarios: list,
               firsts: list[dict] | None = None) -> str:
    """docs/matrix.md: the catalog, the newest live and replay results, and each
    scenario's first try."""
    out = ["# The fault matrix", "",
           "Generated by `kmon matrix doc` from the newest results in bench/results/; do not "
           "edit by hand.", "",
           f"Each scenario causes one fault one way on a real local cluster; its ground truth "
           f"names the findings a correct monitor hands over (type, entity, cause, severity) "
           f"within {DETECT_WITHIN_S:.0f} s of the fault becoming visible, and any other "
           f"finding in the scenario's time is unexplained (a false page), in any state it "
           f"was handed over in, not only its last (a critical page taken back to a warning "
           f"was still a page). A finding handed over after its scenario ended whose "
           f"evidence began before that scenario's fault was healed is that fault's, "
           f"scored there, not in the next scenario. "
           f"`kmon matrix run` runs them live and records each into tests/corpus/; the "
           f"monitor shares the cluster's host, its Spark JVM at a lower CPU priority "
           f"(demo.runner.MONITOR_NICENESS), as if the pipeline ran on machines of its "
           f"own; "
           f"`kmon matrix replay` (and CI) replays the recordings with no cluster. The whole "
           f"live matrix takes hours on a small machine: its result file is saved after "
           f"each scenario, and `kmon matrix run --resume <that file>` runs the scenarios it "
           f"has no result for yet. With `--no-record` the recordings stay as they are and "
           f"the scenarios that fail are recorded under <work_dir>/matrix-failed/ instead, "
           f"for `kmon matrix replay --corpus <that folder>`: a live failure can be "
           f"replayed while its rule is fixed. Such a recording also keeps what the live "
           f"evaluations read, as the data had arrived then (a replay sees it complete by "
           f"event time): `kmon matrix rescore --corpus <that folder>` runs the detectors "
           f"over that, so a race between late telemetry and an evaluation comes back.", "",
           "## Scenarios", "", "| scenario | class | topology | how |", "|---|---|---|---|"]
    out += [f"| {s.name} | {s.fault_class} | {s.topology.describe()} | {s.summary} |"
            for s in scenarios]
    for title, data in (("Live", live), ("Replay of the recorded corpus", replay)):
        out += ["", f"## {title}", ""]
        if data is None:
            out.append("No results yet.")
            continue
        out += ["Each scenario's newest result; the runs it comes from "
                f"({data['machine'].get('cpus')} cores):", ""]
        runs = data.get("runs", [data])
        out += [f"- `{r['command']}` on {r['date']} (commit {r.get('commit') or '?'}, "
                f"rules {r.get('rules') or 'not recorded'})" for r in runs]
        versions = {r.get("rules") for r in runs}
        if title == "Live":
            out += ["", "One rules version (the hash of the detection code, "
                    "`matrix.results.rules_version`) across these runs: "
                    + ("yes." if len(versions) == 1 and None not in versions else "**no**.")]
        out.append("")
        out += _md_rows(data)
    if firsts:
        out += ["", "## First tries", "",
                "Each scenario's first live run, before any rule was changed for it: the "
                "scenarios added after the rules they are judged by are the measure of how "
                "well those rules generalize. A run whose fault did not happen is not a try.",
                "", "| first run | commit | scenarios | passed | failed | not caused |",
                "|---|---|---|---|---|---|"]
        by_run: dict[tuple, list[dict]] = {}
        for x in firsts:
            by_run.setdefault((x["date"], x["commit"]), []).append(x)
        for (date, commit), xs in sorted(by_run.items(), key=lambda kv: str(kv[0][0])):
            tried = [x for x in xs if not x.get("error")]
            names = lambda ys: ", ".join(y["scenario"] for y in ys) or "-"  # noqa: E731
            out.append(f"| {date} | {commit or '?'} | {len(xs)} | "
                       f"{sum(x['passed'] for x in tried)}/{len(tried)} | "
                       f"{names([x for x in tried if not x['passed']])} | "
                       f"{names([x for x in xs if x.get('error')])} |")
    return "\n".join(out) + "\n"

