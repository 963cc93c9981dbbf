"""The `kmon` command: thin entry points that load configuration, build, and start."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from kmon.config import ConfigError, describe_keys, load_config

log = logging.getLogger("kmon")

EPILOG = """\
examples:
  kmon setup                      resolve JVM jars into .kmon/ (once; offline afterwards)
  kmon demo                       start a local 3-broker cluster, run a workload, stream it
                                  into Delta and summarise every broker's request stages
  kmon cluster up --brokers 3     start a local KRaft cluster and leave it running
  kmon cluster pause 2            freeze broker 2 (SIGSTOP) to inject slowness
  kmon run                        agents + streaming pipeline + detectors + exporter until Ctrl-C
  kmon sql "SELECT * FROM gold.anomalies WHERE status = 'open'"
  kmon config --keys              every configuration key with its default and meaning

Configuration: conf/kmon.toml (or --config FILE, or KMON_CONFIG); any key can be
overridden with KMON__SECTION__KEY=value, e.g. KMON__SPARK__MASTER=spark://host:7077.
"""


# Commands with a console of their own (steps, progress, findings): their logs go to
# files (kmon/log_files.py).
LOGGED_TO_FILES = ("demo", "run", "matrix")


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _setup_logging(args, config):
    """Records on the console for the short commands; to files for `demo` and `run` (their
    paths printed first), the console too with -v. Returns the files, if any."""
    from kmon import log_files

    level = "DEBUG" if args.verbose else config.kmon.log_level
    if args.command not in LOGGED_TO_FILES or getattr(args, "action", None) in ("list", "doc"):
        log_files.to_console(level)
        return None
    files = log_files.log_files(config.work_dir, args.command)
    log_files.to_files(files, level, verbose=args.verbose, command=args.command)
    print(f"kmon {args.command}: {files.describe()}", flush=True)
    return files


# ---- commands --------------------------------------------------------------------------

def cmd_setup(args, config) -> int:
    from infra import preflight
    from infra.jvm_deps import ARTIFACT_SETS, JvmDeps

    preflight.check_python()
    preflight.check_java(config.jvm.java_home)
    preflight.check_disk(config.work_dir)
    deps = JvmDeps(config.work_dir, config.jvm.maven_repo, config.jvm.offline)
    downloaded = []
    for name in ARTIFACT_SETS:
        if deps.is_ready(name):
            print(f"  jars {name:10s} cached ({len(deps.jars(name))} jars in {deps.set_dir(name)})")
            continue
        preflight.check_maven()
        t = time.monotonic()
        jars = deps.ensure(name)
        downloaded.append(name)
        print(f"  jars {name:10s} resolved {len(jars)} jars in {time.monotonic() - t:.0f}s")
    print("setup complete: " + (f"resolved {', '.join(downloaded)}" if downloaded
                                 else "everything was cached, nothing downloaded"))
    return 0


def cmd_config(args, config) -> int:
    if args.keys:
        print(describe_keys())
        return 0
    import dataclasses

    from kmon.config import SECTIONS
    out = {name: dataclasses.asdict(getattr(config, name)) for name in SECTIONS}
    print(f"# effective configuration from {config.source}")
    print(json.dumps(out, indent=2))
    return 0


def _cluster(args, config, **kw):
    from infra.local_cluster import LocalCluster
    return LocalCluster(config, name=args.name, **kw)


def cmd_cluster(args, config) -> int:
    from infra.local_cluster import ClusterError

    action = args.action
    if action == "up":
        cl = _cluster(args, config, brokers=args.brokers)
        cl.start(fresh=not args.keep_data)
        print(f"cluster '{cl.name}' up: bootstrap.servers={cl.bootstrap_servers}")
        _print_status(cl)
        print(f"stop it with: kmon cluster down{'' if args.name is None else ' --name ' + args.name}")
        return 0
    cl = _cluster(args, config)
    if not cl.nodes:
        raise ClusterError(f"no cluster named '{cl.name}' under {cl.home.parent}: "
                           "start one with `kmon cluster up`")
    if action == "down":
        cl.destroy() if args.delete else cl.stop()
        print(f"cluster '{cl.name}' stopped" + (" and deleted" if args.delete else ""))
    elif action == "status":
        _print_status(cl)
    else:
        getattr(cl, {"stop-node": "stop_node"}.get(action, action))(args.node)
        print(f"node {args.node}: {action} done")
        _print_status(cl)
    return 0


def _print_status(cl) -> None:
    print(f"{'node':>4}  {'state':8}  {'pid':>7}  {'bootstrap':22}  metrics")
    for r in cl.status():
        print(f"{r['node']:>4}  {r['state']:8}  {str(r['pid'] or '-'):>7}  {r['bootstrap']:22}  {r['metrics']}")


def cmd_demo(args, config) -> int:
    from demo.replay import run_replay
    from demo.runner import run_demo
    if args.replay:
        return run_replay(config, summary_json=args.summary_json)
    return run_demo(config, keep=args.keep, short=args.short, exporter_port=args.exporter_port,
                    summary_json=args.summary_json,
                    faults=args.faults.split(",") if args.faults else None,
                    capture_to=args.capture, warmup_s=args.warmup)


def cmd_matrix(args, config) -> int:
    from matrix import command

    names = [n.strip() for n in (args.scenarios or "").split(",") if n.strip()] or None
    line = "kmon matrix " + " ".join(sys.argv[2:] if len(sys.argv) > 2 else [args.action])
    try:   # an unknown scenario or a recording missing from the corpus: one line, exit 2
        command.check_names(args.action, names, args.corpus)
    except ValueError as e:
        print(f"kmon matrix {args.action}: {e}", file=sys.stderr)
        return 2
    if args.action == "list":
        return command.list_scenarios()
    if args.action == "run":
        return command.run(config, names, record=not args.no_record, port=args.exporter_port,
                           warmup_s=args.warmup, command=line, resume=args.resume)
    if args.action == "replay":
        return command.replay(config, names, step_s=args.step, command=line,
                              corpus=args.corpus, results_dir=args.results_dir)
    if args.action == "rescore":
        return command.rescore(config, names, corpus=args.corpus)
    return command.doc()


def cmd_run(args, config) -> int:
    from kmon.monitor import run
    return run(config, agents=not args.no_agents, duration_s=args.duration,
               exporter_port=args.exporter_port,
               state_dir=Path(args.state_dir) if args.state_dir else None)


def cmd_agents(args, config) -> int:
    """The embedded agents alone (no Spark), e.g. beside `kmon run --no-agents`."""
    import signal
    import threading
    from pathlib import Path

    from prometheus_client import CollectorRegistry, start_http_server

    from infra.lake import Lake
    from ingest.supervisor import AgentSupervisor
    from kmon.monitor import build_agents, build_host_agents

    registry = CollectorRegistry()
    state = Path(args.state_dir) if args.state_dir else config.work_dir / "agent-state"
    lake = Lake(config.storage_root)
    if any(v is not None for v in (args.broker_id, args.log_dir, args.request_log,
                                   args.metrics_url)) or args.offsets:
        agents = build_host_agents(config, registry, lake, state, broker=args.broker_id,
                                   log_dir=args.log_dir, request_log=args.request_log,
                                   metrics_url=args.metrics_url, offsets=args.offsets)
    else:
        agents = build_agents(config, registry, lake, state)
    sup = AgentSupervisor(agents)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if args.metrics_port:
        start_http_server(args.metrics_port, addr="127.0.0.1", registry=registry)
        print(f"agent metrics: http://127.0.0.1:{args.metrics_port}/metrics", flush=True)
    sup.start()
    print(f"agents running ({', '.join(s.name for s in sup.agents)}); positions in {state}; "
          "Ctrl-C stops them after a final drain", flush=True)
    stop.wait(args.duration) if args.duration else stop.wait()
    sup.stop()
    print("agents stopped; positions saved", flush=True)
    return 0


def cmd_remediate(args, config) -> int:
    """The remediation executor: consume the action queue and act with guards until Ctrl-C."""
    import signal
    import threading

    from remediation.executor import build_executor
    from remediation.stores import JsonLinesResultStore

    bootstrap = None
    if not config.watch.bootstrap_servers:
        from kmon.monitor import _local_cluster
        bootstrap = _local_cluster(config).bootstrap_servers
    results = JsonLinesResultStore(config.work_dir / "remediation" / "results.jsonl")
    executor = build_executor(config, bootstrap_servers=bootstrap, results=results)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"remediation executor running (dry_run={config.remediation.dry_run}, enabled: "
          f"{', '.join(config.remediation.enabled_actions) or 'none'}); results in "
          f"{config.work_dir / 'remediation' / 'results.jsonl'}", flush=True)
    executor.run(stop)
    return 0


def cmd_report(args, config) -> int:
    from reports.cli import run as run_report
    return run_report(args, config)


def _spark_with_tables(config):
    from infra.lake import Lake, register_tables
    from infra.spark_session import build_spark_session

    spark = build_spark_session(config)
    lake = Lake(config.storage_root)
    return spark, lake, register_tables(spark, lake)


def cmd_sql(args, config) -> int:
    query = args.query if args.query != "-" else sys.stdin.read()
    spark, _lake, tables = _spark_with_tables(config)
    try:
        if not tables:
            print(f"kmon sql: no tables under {config.storage_root} yet (run `kmon run` or "
                  "`kmon demo` first)", file=sys.stderr)
            return 1
        if args.tables:
            print("\n".join(tables))
            return 0
        df = spark.sql(query)
        if args.format == "json":
            for row in df.limit(args.limit).toJSON().collect():
                print(row)
        elif args.format == "csv":
            rows = df.limit(args.limit).collect()
            print(",".join(df.columns))
            for r in rows:
                print(",".join("" if v is None else str(v) for v in r))
        else:
            df.show(args.limit, truncate=not args.wide)
        return 0
    finally:
        spark.stop()


def cmd_validate(args, config) -> int:
    from pyspark.sql import functions as F

    from jobs.streams import STREAMS, stream
    from jobs.validation import validate_with_great_expectations

    spark, lake, _tables = _spark_with_tables(config)
    failed = 0
    try:
        for s in ([stream(args.table)] if args.table else STREAMS):
            path = lake.table("silver", s.name)
            try:
                df = spark.read.format("delta").load(path)
            except Exception:  # noqa: BLE001 - a table that does not exist yet
                print(f"  silver.{s.name:22s} (no table yet)")
                continue
            if args.since_hours:
                df = df.where(F.col(s.time_column) >= F.expr(
                    f"current_timestamp() - INTERVAL {args.since_hours} HOURS"))
            r = validate_with_great_expectations(df, s.name, s.table)
            failed += not r.success
            print(f"  silver.{s.name:22s} {r.rows:>10,} rows  "
                  f"{'ok' if r.success else 'FAILED: ' + '; '.join(r.failures)}")
        return 1 if failed else 0
    finally:
        spark.stop()


def cmd_maintain(args, config) -> int:
    from jobs.maintenance import Maintenance

    spark, lake, tables = _spark_with_tables(config)
    try:
        if not tables:
            print(f"kmon maintain: no tables under {config.storage_root} yet", file=sys.stderr)
            return 1
        only = [t.strip() for t in args.tables.split(",")] if args.tables else None
        unknown = sorted(set(only or ()) - set(tables))
        if unknown:
            print(f"kmon maintain: no table {', '.join(unknown)} under {config.storage_root} "
                  f"(tables: {', '.join(tables)})", file=sys.stderr)
            return 2
        m = config.maintenance
        print(f"kmon maintain: {len(only or tables)} tables under {config.storage_root}: "
              f"z-order closed days ({'on' if m.zorder else 'off'}), compact the open day's "
              f"files under {m.small_file_mb} MiB, vacuum past {m.vacuum_retain_h:g} h"
              + (f", delete landing files a committed batch read once {m.landing_retain_h:g} h "
                 f"old" if m.prune_landing and not only else "")
              + ("" if args.all else "; findings, lag and remediation tables vacuumed only "
                 "(--all with kmon stopped)"), flush=True)
        maintenance = Maintenance(spark, lake, m, live=not args.all,
                                  log_retention_h=config.spark.delta_log_retention_h)
        outcomes = maintenance.run(only, progress=lambda o: print("  " + o.line(), flush=True))
        for o in maintenance.landing:
            if o.files_before:
                print(f"  {'landing/' + o.stream:32s} files {o.files_before:>6,} -> "
                      f"{o.files_after:<6,} deleted {o.bytes_deleted / 2**20:,.1f} MiB"
                      + (f"  ERRORS: {'; '.join(o.errors[:3])}" if o.errors else ""),
                      flush=True)
        failed = [o for o in outcomes if o.errors] + [o for o in maintenance.landing if o.errors]
        print(f"kmon maintain: files {sum(o.files_before for o in outcomes):,} -> "
              f"{sum(o.files_after for o in outcomes):,}, on disk "
              f"{sum(o.disk_bytes_before for o in outcomes) / 2**20:,.1f} -> "
              f"{sum(o.disk_bytes_after for o in outcomes) / 2**20:,.1f} MiB; "
              f"{len(failed)} tables with errors; what was done is in gold.table_maintenance")
        return 1 if failed else 0
    finally:
        spark.stop()


def cmd_dashboards(args, config) -> int:
    import os

    from dashboards.build import main as build_dashboards
    token = os.environ.get(args.token_env) if args.push else None
    return build_dashboards(args.out, args.push, token)


# ---- parser ----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kmon", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="kmon: full-link monitoring for Apache Kafka on Spark and Delta Lake.")
    p.add_argument("--config", help="configuration file (default: conf/kmon.toml or $KMON_CONFIG)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="debug logging, on the console (`demo` and `run` otherwise log to "
                        "files under <work_dir>/logs, named at their start)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name, help_, example, **kw):
        sp = sub.add_parser(name, help=help_, description=help_, epilog=f"example:\n  {example}",
                            formatter_class=argparse.RawDescriptionHelpFormatter, **kw)
        return sp

    add("setup", "Check Java, Python and disk; resolve the JVM jars once (cached, offline after)",
        "kmon setup")
    sp = add("config", "Show the effective configuration, or every key with --keys",
             "kmon config --keys")
    sp.add_argument("--keys", action="store_true", help="list every key, its default and meaning")

    sp = add("cluster", "Manage a local Apache Kafka cluster (KRaft) for tests and the demo",
             "kmon cluster up --brokers 3 && kmon cluster pause 2 && kmon cluster resume 2")
    sp.add_argument("action", choices=["up", "down", "status", "pause", "resume", "kill",
                                       "stop-node", "restart"],
                    help="up/down/status for the cluster; pause, resume, kill, stop-node, "
                         "restart act on one node")
    sp.add_argument("node", nargs="?", type=int, help="node id for per-node actions")
    sp.add_argument("--name", help="cluster name (default: local_cluster.name)")
    sp.add_argument("--brokers", type=int, help="number of nodes for `up`")
    sp.add_argument("--keep-data", action="store_true",
                    help="`up`: restart the existing cluster with its data instead of a fresh one")
    sp.add_argument("--delete", action="store_true", help="`down`: also delete its data and logs")

    sp = add("demo", "Run the main job on its embedded default: a real local 3-broker cluster, a "
                     "workload, agents, the streaming pipeline, detectors and the exporter; then "
                     "four real faults (slow broker, offset rewinds, compaction lag, unclean "
                     "election) and a summary of what was detected and how fast (about 20 "
                     "minutes on 2 cores; --short about 15; --replay about 3 with no cluster)",
             "kmon demo   |   kmon demo --short --faults slow_broker   |   kmon demo --replay")
    sp.add_argument("--keep", action="store_true",
                    help="leave the cluster and the lake for a look around")
    sp.add_argument("--short", action="store_true",
                    help="shorter warm-up and waits (what the test runs)")
    sp.add_argument("--warmup", type=_positive_seconds, metavar="S",
                    help="seconds of healthy load before the first fault, in which nothing may "
                         "be flagged (default 150; 90 with --short)")
    sp.add_argument("--faults", help="comma-separated subset: slow_broker,offset_rewind,"
                                     "compaction_lag,unclean_election")
    sp.add_argument("--exporter-port", type=int, default=None,
                    help="port of the Prometheus exporter (default 9464; 0 = off)")
    sp.add_argument("--replay", action="store_true",
                    help="no cluster: feed the telemetry captured from a demo run (demo/capture) "
                         "through the same pipeline and detectors")
    sp.add_argument("--summary-json", help="also write the summary as JSON to this file")
    sp.add_argument("--capture", metavar="DIR",
                    help="keep this run's telemetry (small, gzipped) in DIR for --replay "
                         "(the repository's copy is demo/capture)")

    sp = add("matrix", "The fault matrix: scenarios (several ways to cause each kind of fault, on "
                       "several topologies) with ground truth; `run` causes them on real local "
                       "clusters and records each into tests/corpus/, `replay` scores the "
                       "recordings with no cluster (what CI does), `rescore` runs only the "
                       "detectors again over what the last replay read, or what a failed "
                       "live scenario's evaluations read (no Spark, seconds), "
                       "`doc` writes docs/matrix.md",
             "kmon matrix list   |   kmon matrix run --scenarios freeze-short-3b   |   "
             "kmon matrix replay")
    sp.add_argument("action", choices=["list", "run", "replay", "rescore", "doc"])
    sp.add_argument("--scenarios", help="comma-separated subset (default: all; see `list`)")
    sp.add_argument("--no-record", action="store_true",
                    help="`run`: score only, do not overwrite the recordings in tests/corpus/ "
                         "(the scenarios that fail are recorded under "
                         "<work_dir>/matrix-failed/, to replay)")
    sp.add_argument("--exporter-port", type=int, default=9464,
                    help="`run`: port of the Prometheus exporter (default 9464; 0 = off)")
    sp.add_argument("--warmup", type=_positive_seconds, metavar="S",
                    help="`run`: seconds of healthy load per cluster before its first scenario "
                         "(default 150)")
    sp.add_argument("--resume", type=Path, metavar="RESULTS",
                    help="`run`: go on with a run that stopped, from its results file "
                         "(bench/results/matrix-live-*.json, saved after every scenario): "
                         "the scenarios it asked for that have no result yet, into it")
    sp.add_argument("--step", type=_positive_seconds, default=20.0,
                    help="`replay`: evaluate the detectors every this many recorded seconds "
                         "(default 20, the live detector trigger)")
    sp.add_argument("--corpus", type=Path, metavar="DIR",
                    help="`replay`, `rescore`: the recordings (default tests/corpus; e.g. the "
                         "failed ones a `run --no-record` kept)")
    sp.add_argument("--results-dir", type=Path, metavar="DIR",
                    help="`replay`: write the results JSON here (default bench/results)")

    sp = add("run", "Run the whole pipeline until Ctrl-C: agents, bronze/silver/gold queries, "
                    "detectors and the Prometheus exporter, with progress per query",
             "kmon cluster up && kmon run --duration 600")
    sp.add_argument("--no-agents", action="store_true",
                    help="run only the jobs and the exporter (agents run on the broker hosts)")
    sp.add_argument("--duration", type=_positive_seconds,
                    help="stop by itself after this many seconds")
    sp.add_argument("--exporter-port", type=int,
                    help="exporter port (default pipeline.exporter_port; 0 = off)")
    sp.add_argument("--state-dir", help="where the agents keep their positions "
                                        "(default <work_dir>/agent-state)")

    sp = add("agents", "Run the agents alone (no Spark): for the local cluster by default, or "
                       "for one broker host of a real cluster (--broker-id ...) and/or the "
                       "cluster's __consumer_offsets (--offsets)",
             "kmon agents --broker-id 12 --request-log /var/log/kafka/kafka-request.log "
             "--log-dir /var/log/kafka --metrics-url http://localhost:7071/metrics")
    sp.add_argument("--broker-id", type=int, help="node id of the broker on this host")
    sp.add_argument("--request-log", help="this broker's kafka-request.log")
    sp.add_argument("--log-dir", help="this broker's log folder (server, controller, "
                                      "state-change, log-cleaner logs)")
    sp.add_argument("--metrics-url", help="this broker's JMX exporter /metrics URL")
    sp.add_argument("--offsets", action="store_true",
                    help="read __consumer_offsets and end offsets of watch.bootstrap_servers")
    sp.add_argument("--state-dir", help="where positions are kept (default <work_dir>/agent-state)")
    sp.add_argument("--duration", type=_positive_seconds,
                    help="stop by itself after this many seconds")
    sp.add_argument("--metrics-port", type=int, default=0, help="serve agent metrics here")

    add("remediate", "Run the remediation executor: take actions from the queue, re-check "
                     "preconditions and guards, act (or log in dry-run), record the result",
        "KMON__REMEDIATION__DRY_RUN=true kmon remediate")

    sp = add("report", "Write an incident's self-contained HTML report: chain of findings, "
                       "stage breakdowns, offsets, lag, and the SQL behind every number",
             "kmon report --incident <id>   or   kmon report --from 2026-11-22T10:00Z "
             "--to 2026-11-22T11:00Z --out r.html")
    from reports.cli import add_arguments as report_arguments
    report_arguments(sp)

    sp = add("sql", "Run Spark SQL against the kmon tables (bronze.*, silver.*, gold.*)",
             "kmon sql \"SELECT broker, max(total_p99_ms) FROM gold.request_stages_1m "
             "GROUP BY broker\"")
    sp.add_argument("query", nargs="?", default="-", help="the SQL ('-' reads standard input)")
    sp.add_argument("--limit", type=int, default=50, help="rows to print (default 50)")
    sp.add_argument("--format", choices=["table", "json", "csv"], default="table")
    sp.add_argument("--wide", action="store_true", help="do not cut long values")
    sp.add_argument("--tables", action="store_true", help="list the registered tables and exit")

    sp = add("validate", "Check silver tables with their great-expectations suites",
             "kmon validate --table request_stages --since-hours 24")
    sp.add_argument("--table", help="one silver table (default: all)")
    sp.add_argument("--since-hours", type=float, help="only rows newer than this")

    sp = add("maintain", "Maintain the Delta tables now: Z-order each closed day by (broker, "
                         "time), compact the open day's small files, vacuum old versions, "
                         "delete the landing files a committed batch read "
                         "(`kmon run` does it every [maintenance] every_h hours)",
             "kmon maintain --tables gold.request_stages_1m,silver.request_windows")
    sp.add_argument("--tables", help="comma-separated <layer>.<name> (default: every table)")
    sp.add_argument("--all", action="store_true",
                    help="also rewrite the tables written by MERGE (findings, lag, "
                         "remediation) and set spark.delta_log_retention_h on tables made "
                         "before it: only while kmon is stopped, a running detector's "
                         "MERGE or a stream's append would fail against the change")

    sp = add("dashboards", "Write the Grafana dashboards (JSON for file provisioning) and "
                           "optionally push them to Grafana",
             "GRAFANA_TOKEN=... kmon dashboards --push https://grafana.example.com")
    sp.add_argument("--out", default="dashboards/generated", help="output folder")
    sp.add_argument("--push", metavar="GRAFANA_URL", help="also upsert them into this Grafana")
    sp.add_argument("--token-env", default="GRAFANA_TOKEN",
                    help="environment variable holding the Grafana API token")
    return p


COMMANDS = {"setup": cmd_setup, "config": cmd_config, "cluster": cmd_cluster, "demo": cmd_demo,
            "run": cmd_run, "agents": cmd_agents, "remediate": cmd_remediate,
            "report": cmd_report, "sql": cmd_sql, "validate": cmd_validate,
            "maintain": cmd_maintain,
            "dashboards": cmd_dashboards, "matrix": cmd_matrix}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "cluster" and args.action in ("pause", "resume", "kill", "stop-node",
                                                     "restart") and args.node is None:
        print(f"kmon cluster {args.action}: which node? e.g. kmon cluster {args.action} 2",
              file=sys.stderr)
        return 2
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"kmon: configuration error: {e}", file=sys.stderr)
        return 2
    files = _setup_logging(args, config)
    code = 1
    try:
        code = _run_command(args, config)
        return code
    finally:
        if files is not None and code not in (0, 130):
            print(f"kmon {args.command}: the log of this run is {files.records}",
                  file=sys.stderr, flush=True)


def _run_command(args, config) -> int:
    """The command's exit code; the errors kmon expects are one line on standard error."""
    from infra.jvm_deps import JvmDependencyError
    from infra.local_cluster import ClusterError
    from infra.preflight import PreflightError
    from kmon.monitor import RunError
    try:
        return COMMANDS[args.command](args, config)
    except ConfigError as e:
        print(f"kmon: configuration error: {e}", file=sys.stderr)
        return 2
    except (PreflightError, ClusterError, JvmDependencyError, RunError) as e:
        print(f"kmon: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kmon: interrupted; everything it started has been stopped", file=sys.stderr)
        return 130

