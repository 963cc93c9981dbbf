"""`kmon matrix list | run | replay | rescore | doc`: what the command line calls."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from matrix import results
from matrix.scenarios import by_name, catalog


def check_names(action: str, names: list[str] | None, corpus: Path | None = None) -> None:
    """ValueError naming what `--scenarios` asked for that does not exist."""
    from matrix.corpus import CORPUS_DIR, recordings

    if names and action == "run":
        by_name(names)
    elif names and action in ("replay", "rescore"):
        recordings(corpus or CORPUS_DIR, names=names)


def list_scenarios(out=sys.stdout) -> int:
    from matrix.corpus import CORPUS_DIR

    recorded = {p.name for p in CORPUS_DIR.iterdir()} if CORPUS_DIR.exists() else set()
    for s in catalog():
        mark = "recorded" if s.name in recorded else "-"
        print(f"{s.name:28s} {s.fault_class:17s} {s.topology.name:8s} {mark:9s} {s.summary}",
              file=out)
    return 0


def run(config, names: list[str] | None, *, record: bool, port: int, command: str,
        warmup_s: float | None = None, resume: Path | None = None, out=sys.stdout) -> int:
    """The scenarios live; the result file is rewritten after each one (``complete``
    false until every scenario asked for has run), so a run cut short keeps what it did
    and `resume` (that file) runs the rest into it: the whole matrix takes longer than
    one sitting on a small machine."""
    import json
    from dataclasses import replace

    from matrix.corpus import CORPUS_DIR
    from matrix.live import MatrixSettings, run_matrix

    rows: list[dict] = []
    runs: list[dict] = []
    path = None
    if resume is not None:
        try:
            prior = json.loads(resume.read_text())
        except (OSError, ValueError) as e:
            print(f"kmon matrix run: --resume {resume}: {e}", file=out)
            return 2
        if prior.get("mode") != "live":
            print(f"kmon matrix run: --resume {resume}: not a live matrix result", file=out)
            return 2
        rows, runs, path = list(prior["scenarios"]), list(prior.get("runs", [])), resume
        ran_at = {r.get("rules") for r in runs} or {prior.get("rules")}
        if ran_at != {results.rules_version()}:
            print(f"kmon matrix run: --resume {resume}: its runs were at rules version(s) "
                  f"{', '.join(sorted(str(v) for v in ran_at))}, the detection code is now at "
                  f"{results.rules_version()}: one run's parts must be at one rules version; "
                  f"start a new run", file=out)
            return 2
        names = prior.get("asked") or [s.name for s in catalog()]
        command = prior["command"]
    wanted = by_name(names)
    asked = [s.name for s in wanted]
    done_names = {r["scenario"] for r in rows}
    scenarios = [s for s in wanted if s.name not in done_names]
    commit, rules = results.commit(), results.rules_version()
    runs.append({"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "commit": commit, "rules": rules, "scenarios": [s.name for s in scenarios]})
    meta = {"recorded_with": command, "commit": commit, "machine": results.machine()}
    settings = MatrixSettings() if warmup_s is None else replace(MatrixSettings(),
                                                                  warmup_s=warmup_s)

    def save(complete: bool) -> Path:
        nonlocal path
        path = results.write("live", command, rows, results.scores_of(rows), path=path,
                             at_commit=commit, asked=asked, complete=complete, runs=runs,
                             rules=rules)
        return path

    def on_result(r) -> None:
        """A new result, or an earlier one scored again (late findings of its fault)."""
        row = r.to_json()
        again = [i for i, x in enumerate(rows) if x["scenario"] == row["scenario"]
                 and x.get("started_ms") == row["started_ms"]]
        if again:
            rows[again[0]] = row
        else:
            rows.append(row)
        save(complete=False)

    if scenarios:
        print(f"kmon matrix run: {len(scenarios)} scenario(s) to run"
              + (f", {len(done_names)} done before ({resume})" if resume else ""),
              file=out, flush=True)
        failed_dir = None if record else config.work_dir / "matrix-failed" / time.strftime(
            "%Y%m%dT%H%M%SZ", time.gmtime())
        run_matrix(config, scenarios, corpus=CORPUS_DIR if record else None, port=port,
                   settings=settings, meta=meta, out=out, on_result=on_result,
                   failed_dir=failed_dir)
        if failed_dir is not None and failed_dir.exists():
            print(f"\nthe failed scenarios are recorded in {failed_dir}: "
                  f"kmon matrix replay --corpus {failed_dir}", file=out, flush=True)
    scores = results.scores_of(rows)
    complete = {r["scenario"] for r in rows} >= set(asked)
    path = save(complete)
    print("\n" + results.console_table(scores), file=out)
    print(f"\nresults: {path}" + ("" if complete else
                                  f" (not complete: go on with kmon matrix run --resume {path})"),
          file=out, flush=True)
    return 0 if complete and all(s.passed for s in scores) else 1


def replay(config, names: list[str] | None, *, step_s: float, command: str,
           corpus: Path | None = None, results_dir: Path | None = None,
           out=sys.stdout) -> int:
    from infra.spark_session import build_spark_session
    from matrix.corpus import CORPUS_DIR, EmptyLakes, recordings, replay_all, replay_config

    recs = recordings(corpus or CORPUS_DIR, names)
    if not recs:
        print(f"no recordings in {corpus or CORPUS_DIR}: record some with `kmon matrix run`",
              file=out)
        return 1
    commit, rules = results.commit(), results.rules_version()   # the code that ran
    root = config.work_dir / "matrix-replay"
    spark = build_spark_session(replay_config(config, recs[0], root / recs[0].scenario))
    empty_lakes = EmptyLakes(spark, root / "empty-lakes")
    rows, scores, errors = [], [], []
    try:
        replays = replay_all(spark, config, recs, root, step_s, empty_lakes, keep_inputs=True)
        for i, (rec, outcome) in enumerate(replays, 1):
            print(f"[{i}/{len(recs)}] {rec.scenario}: {rec.manifest.get('title', '')}",
                  file=out, flush=True)
            if isinstance(outcome, Exception):
                errors.append(rec.scenario)
                print(f"      ERROR {type(outcome).__name__}: {outcome}", file=out, flush=True)
                continue
            scores.append(scored_row(rec, outcome, rows, out))
    finally:
        spark.stop()
    print("\n" + results.console_table(scores), file=out)
    path = results.write("replay", command, rows, scores, at_commit=commit, rules=rules,
                         **({"out_dir": results_dir} if results_dir else {}))
    print(f"\nresults: {path}", file=out, flush=True)
    if errors:
        print(f"replay failed (not scored): {', '.join(errors)}", file=out, flush=True)
    return 0 if all(s.passed for s in scores) and not errors else 1


def scored_row(rec, outcome: tuple, rows: list, out):
    """A recording's (score, seen): its row appended to `rows`, its verdict printed; the
    score."""
    sc, seen = outcome
    rows.append({**sc.to_json(), "topology": rec.manifest["topology"]["name"],
                 "seen": [f"{(t - rec.truth.fault_ms) / 1000:+.0f}s {d['severity']} "
                          f"{d['type']} ({d['cause']}) {d['entity']}" for t, d in seen]})
    print(f"      {'PASS' if sc.passed else 'FAIL'}"
          + "".join(f"\n      {x}" for x in sc.failures()), file=out, flush=True)
    return sc


def rescore(config, names: list[str] | None, *, corpus: Path | None = None,
            out=sys.stdout) -> int:
    """The detectors again over the inputs the last `replay` kept, without Spark: a rule
    change checked on the whole corpus in seconds (matrix/corpus.py `rescore`). Writes no
    result file: a replay is the record."""
    from matrix.corpus import CORPUS_DIR, recordings
    from matrix.corpus import rescore as rescore_one

    recs = recordings(corpus or CORPUS_DIR, names)
    root = config.work_dir / "matrix-replay"
    rows, scores, errors = [], [], []
    for i, rec in enumerate(recs, 1):
        print(f"[{i}/{len(recs)}] {rec.scenario}: {rec.manifest.get('title', '')}",
              file=out, flush=True)
        try:
            outcome = rescore_one(config, rec, root)
        except ValueError as e:
            errors.append(rec.scenario)
            print(f"      ERROR {e}", file=out, flush=True)
            continue
        scores.append(scored_row(rec, outcome, rows, out))
    print("\n" + results.console_table(scores), file=out)
    if errors:
        print(f"not rescored: {', '.join(errors)}", file=out, flush=True)
    return 0 if all(s.passed for s in scores) and not errors else 1


def doc(out=sys.stdout) -> int:
    results.DOC.write_text(results.render_doc(results.newest("live"), results.newest("replay"),
                                              catalog(), results.first_tries()))
    print(f"wrote {results.DOC}", file=out)
    return 0
