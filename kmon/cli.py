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
  kmon config --keys              every configuration key with its default and meaning

Configuration: conf/kmon.toml (or --config FILE, or KMON_CONFIG); any key can be
overridden with KMON__SECTION__KEY=value, e.g. KMON__SPARK__MASTER=spark://host:7077.
"""


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("py4j", "kmon.local_cluster.admin"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# ---- commands --------------------------------------------------------------------------

def cmd_setup(args, config) -> int:
    from kmon import preflight
    from kmon.jvm_deps import ARTIFACT_SETS, JvmDeps

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
    from kmon.local_cluster import LocalCluster
    return LocalCluster(config, name=args.name, **kw)


def cmd_cluster(args, config) -> int:
    from kmon.local_cluster import ClusterError

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
    from jobs.demo import run_demo
    return run_demo(config, keep=args.keep, messages=args.messages)


# ---- parser ----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kmon", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="kmon: full-link monitoring for Apache Kafka on Spark and Delta Lake.")
    p.add_argument("--config", help="configuration file (default: conf/kmon.toml or $KMON_CONFIG)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
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

    sp = add("demo", "Run the main job on its embedded default: a real local cluster, a workload, "
                     "the pipeline, and a summary", "kmon demo")
    sp.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    sp.add_argument("--messages", type=int, default=20000, help="messages the workload produces")
    return p


COMMANDS = {"setup": cmd_setup, "config": cmd_config, "cluster": cmd_cluster, "demo": cmd_demo}


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
    _setup_logging("DEBUG" if args.verbose else config.kmon.log_level)
    from kmon.jvm_deps import JvmDependencyError
    from kmon.local_cluster import ClusterError
    from kmon.preflight import PreflightError
    try:
        return COMMANDS[args.command](args, config)
    except (PreflightError, ClusterError, JvmDependencyError) as e:
        print(f"kmon: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kmon: interrupted; everything it started has been stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
