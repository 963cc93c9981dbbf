"""A real local Apache Kafka cluster (KRaft) on loopback.

Nodes 1..``brokers`` are brokers; the last ``local_cluster.controllers`` of them (all by
default) are KRaft controllers too, in combined mode, unless
``local_cluster.dedicated_controllers`` puts the quorum on controller-only nodes after
them (see `infra.cluster_layout`). ``nodes`` is every node (each one's files and JMX are
worth shipping: a controller's controller.log and meters carry the elections);
``broker_nodes`` the ones clients and replicas talk to.

Each node is a separate JVM started from the Apache jars resolved by `infra.jvm_deps`,
with its own data and log folders under ``<work_dir>/clusters/<name>/node-<id>``:

- ``logs/kafka-request.log``: ``kafka.request.logger`` at DEBUG (every request's stage
  timings), apart from ``server.log``, ``controller.log``, ``state-change.log`` and
  ``log-cleaner.log``, all in Kafka's own layout ``[%d] %p %m (%c)%n``;
- the Prometheus JMX exporter java agent on its own port, with rules that keep the
  RequestMetrics stage histograms (see resources/jmx-exporter.yaml).

The cluster's layout, ports and process ids are kept in ``cluster.json`` so another
process (``kmon cluster status`` / ``down``) can find it. Nodes can be paused (SIGSTOP),
resumed, killed (SIGKILL), stopped and restarted one at a time for fault injection.
``node_env`` gives single nodes more environment variables (e.g. LD_PRELOAD of libfaketime,
for a broker whose wall clock is stepped), ``node_config`` more server.properties entries,
over every broker's (a static setting one broker runs with, e.g. its log cleaner off); both
apply from the node's next start or `restart`.

Processes never outlive their owner when ``owner_bound`` is set (tests, the demo): the
kernel kills each broker when the process that started it dies (PR_SET_PDEATHSIG), and
`stop()` is safe to call any number of times.
"""

from __future__ import annotations

import base64
import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from core.config_keys import _key
from core.config_keys import ConfigError
from infra.cluster_layout import (ClusterError, Node, Routes, allocate_ports, node_properties,
                                  node_roles)
from infra.jvm_deps import JvmDeps, JvmSection
from infra.procfs import STATE, stat_fields

__all__ = ["ClusterError", "LocalCluster", "LocalClusterSection", "Node", "Routes"]


@dataclass(frozen=True)
class LocalClusterSection:
    name: str = _key("Name of the embedded cluster (its folder under <work_dir>/clusters)", "local")
    brokers: int = _key("Number of KRaft nodes (each a broker)", 3, min=1, max=9)
    controllers: int = _key("How many of the nodes are KRaft controllers as well: the "
                            "highest-numbered ones, the rest are brokers only (as on a fleet, "
                            "where the quorum runs apart from the brokers, stopping two brokers "
                            "then leaves the quorum up); 0: every node", 0, min=0, max=9)
    base_port: int = _key("First port to use; 0 allocates free loopback ports", 0, min=0, max=65535)
    dedicated_controllers: int = _key(
        "How many controller-only KRaft nodes (process.roles=controller) to run besides the "
        "brokers, numbered after them; they have no client listener. 0: the quorum runs on "
        "the brokers (see controllers, which must be 0 when this is not)", 0, min=0, max=5)
    heap: str = _key("Java heap per broker (-Xmx and -Xms)", "512m")
    jvm_options: list = _key("More JVM options for every node, after kmon's own, e.g. "
                             "[\"-XX:TieredStopAtLevel=1\"]: the client compiler only, a "
                             "third less CPU to start and idle a short-lived cluster "
                             "(python -m bench.cluster_start_cpu), slower under sustained "
                             "load", [])
    ready_timeout_s: float = _key("How long to wait for the cluster to be ready", 120.0,
                                  min=5, max=3600)
    extra_broker_config: dict = _key("Extra server.properties entries for every broker", {})

    def __post_init__(self) -> None:
        bad = [o for o in self.jvm_options if not (isinstance(o, str) and o.startswith("-"))]
        if bad:
            raise ConfigError(f"local_cluster.jvm_options: every entry must be a JVM option "
                              f"starting with '-', not {bad[0]!r}")
        if self.dedicated_controllers and self.controllers:
            raise ConfigError(
                f"local_cluster.dedicated_controllers ({self.dedicated_controllers}) and "
                f"local_cluster.controllers ({self.controllers}) cannot both be set: with "
                f"dedicated controllers no broker is a controller; set controllers = 0")


log = logging.getLogger(__name__)

RESOURCES = Path(__file__).parent / "resources"


def _proc_state(pid: int | None) -> str | None:
    """The state letter from /proc/<pid>/stat (R, S, T, Z, ...), None if there is no such pid."""
    fields = stat_fields(pid) if pid else None
    return fields[STATE] if fields else None


def _pid_alive(pid: int | None) -> bool:
    return _proc_state(pid) not in (None, "Z", "X")


def _pid_paused(pid: int | None) -> bool:
    return _proc_state(pid) in ("T", "t")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kafka_uuid() -> str:
    """A cluster id as Kafka makes them: never starting with "-", which kafka-storage
    would take for an option ("--cluster-id: expected one argument"), as Uuid.randomUuid."""
    while True:
        out = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not out.startswith("-"):
            return out


class LocalClusterConfig(Protocol):
    """The parts of kmon's configuration a local cluster is built from (kmon.config.Config)."""

    jvm: JvmSection
    local_cluster: LocalClusterSection

    @property
    def work_dir(self) -> Path: ...


class LocalCluster:
    """Start, inspect, disturb and stop a local KRaft cluster."""

    def __init__(self, config: LocalClusterConfig, jvm_deps: JvmDeps | None = None, *, name: str | None = None,
                 brokers: int | None = None, owner_bound: bool = False, log_roll_mb: int = 100,
                 dedicated_controllers: int | None = None, routes: Routes | None = None,
                 node_env: dict[int, dict[str, str]] | None = None,
                 node_config: dict[int, dict[str, str]] | None = None):
        self.config = config
        self.deps = jvm_deps or JvmDeps(config.work_dir, config.jvm.maven_repo, config.jvm.offline)
        self.name = name or config.local_cluster.name
        self.size = brokers or config.local_cluster.brokers        # brokers
        self.controllers = config.local_cluster.controllers   # 0: every broker
        self.dedicated_controllers = (config.local_cluster.dedicated_controllers
                                      if dedicated_controllers is None else dedicated_controllers)
        # Ports advertised instead of a node's own (a proxy in front of it): set before
        # start(), or before restart() of that node (see infra.cluster_layout).
        self.routes = routes or Routes()
        self.owner_bound = owner_bound
        # Node id -> environment variables its JVM gets on top of ours (every launch,
        # restarts too; not the one-shot storage format).
        self.node_env = {int(k): dict(v) for k, v in (node_env or {}).items()}
        # Node id -> server.properties entries over extra_broker_config (written at every
        # start and restart of that node).
        self.node_config = {int(k): {str(a): str(b) for a, b in v.items()}
                            for k, v in (node_config or {}).items()}
        self.log_roll_mb = log_roll_mb
        # The shape start() lays out; a saved state below describes the cluster as it was
        # laid out last, which may be another shape under the same name.
        self.requested_shape = (self.size, self.controllers, self.dedicated_controllers)
        self.home = config.work_dir / "clusters" / self.name
        self.state_file = self.home / "cluster.json"
        self.nodes: list[Node] = []
        self.cluster_id: str | None = None
        self._procs: dict[int, subprocess.Popen] = {}
        if self.state_file.exists():
            self._load_state()

    @property
    def advertised_ports(self) -> dict[int, int]:
        """Node id -> the port it advertises for clients and replicas, when not its own."""
        return self.routes.advertised

    # ---- state ---------------------------------------------------------------------
    def _load_state(self) -> None:
        state = json.loads(self.state_file.read_text())
        self.cluster_id = state["cluster_id"]
        self.nodes = [Node(**n) for n in state["nodes"]]
        if any(not n.roles for n in self.nodes):   # laid out before roles were kept
            for n, roles in zip(self.nodes, node_roles(len(self.nodes), self.controllers, 0)):
                n.roles = roles
        self.size = len(self.broker_nodes)
        self.dedicated_controllers = sum(1 for n in self.nodes if not n.is_broker)

    def _save_state(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"name": self.name, "cluster_id": self.cluster_id,
                                   "nodes": [asdict(n) for n in self.nodes]}, indent=2))
        tmp.replace(self.state_file)

    @property
    def broker_nodes(self) -> list[Node]:
        """The nodes clients and replicas talk to (all but dedicated controllers)."""
        return [n for n in self.nodes if n.is_broker]

    @property
    def controller_nodes(self) -> list[Node]:
        """The KRaft controllers: dedicated ones, or brokers in combined mode."""
        return [n for n in self.nodes if n.is_controller]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.bootstrap for n in self.broker_nodes)

    def node(self, node_id: int) -> Node:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise ClusterError(f"cluster '{self.name}' has no node {node_id} "
                           f"(nodes: {', '.join(str(n.node_id) for n in self.nodes)})")

    def is_running(self) -> bool:
        return any(_pid_alive(n.pid) for n in self.nodes)

    # ---- layout --------------------------------------------------------------------
    def _layout(self) -> None:
        """A fresh layout of the requested shape (not the saved one: a cluster of the same
        name laid out before with another shape is replaced)."""
        self.size, self.controllers, self.dedicated_controllers = self.requested_shape
        roles = node_roles(self.size, self.controllers, self.dedicated_controllers)
        replication = self.routes.needs_replication_listener
        client_link = self.routes.needs_client_link_listener
        per_node = 3 + replication + client_link
        ports = allocate_ports(len(roles), per_node, self.config.local_cluster.base_port)
        if self.home.exists():
            shutil.rmtree(self.home)
        self.home.mkdir(parents=True)
        self.cluster_id = _kafka_uuid()
        self.nodes = []
        for i, (role, p) in enumerate(zip(roles, ports)):
            extra = list(p[3:]) if "broker" in role else []
            replication_port = extra.pop(0) if replication and extra else 0
            client_link_port = extra.pop(0) if client_link and extra else 0
            self.nodes.append(Node(i + 1, p[0], p[1], p[2], str(self.home / f"node-{i + 1}"),
                                   roles=role, replication_port=replication_port,
                                   client_link_port=client_link_port))
        for n in self.nodes:
            n.log_dir.mkdir(parents=True)
            n.data_dir.mkdir(parents=True)
            self._write_node_files(n)
        self._save_state()

    def controller_ids(self) -> list[int]:
        """The KRaft controllers' node ids (dedicated, or the last `controllers` brokers)."""
        if not self.nodes:
            roles = node_roles(self.size, self.controllers, self.dedicated_controllers)
            return [i + 1 for i, r in enumerate(roles) if "controller" in r]
        return [n.node_id for n in self.controller_nodes]

    def _broker_properties(self, n: Node) -> dict[str, str]:
        props = node_properties(n, self.nodes, self.routes,
                                self.config.local_cluster.extra_broker_config)
        props.update({k: str(v) for k, v in self.node_config.get(n.node_id, {}).items()})
        return props

    def _write_node_files(self, n: Node) -> None:
        props = self._broker_properties(n)
        n.server_properties.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = (RESOURCES / "broker-log4j2.properties").read_text()
        log4j = log4j.replace("@LOG_DIR@", str(n.log_dir)).replace("@ROLL_MB@", str(self.log_roll_mb))
        (Path(n.home) / "log4j2.properties").write_text(log4j)
        shutil.copy(RESOURCES / "jmx-exporter.yaml", Path(n.home) / "jmx-exporter.yaml")

    # ---- processes -----------------------------------------------------------------
    def _java(self) -> str:
        jh = self.config.jvm.java_home or os.environ.get("JAVA_HOME", "")
        java = str(Path(jh) / "bin" / "java") if jh else shutil.which("java")
        if not java or not Path(java).exists():
            raise ClusterError("Java 17 is needed to run Kafka brokers and Spark: install it "
                               "(Debian: apt-get install openjdk-17-jdk-headless) or set jvm.java_home")
        return java

    def _classpath(self) -> str:
        return ":".join(str(j) for j in self.deps.ensure("broker"))

    def _format(self, n: Node, classpath: str) -> None:
        # A one-shot tool: the client compiler and the serial collector start it with
        # less CPU than the JVM's defaults (it runs once per node per cluster start).
        cmd = [self._java(), "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", classpath,
               f"-Dlog4j2.configurationFile=file:{Path(n.home) / 'log4j2.properties'}",
               "kafka.tools.StorageTool", "format", "-t", self.cluster_id,
               "-c", str(n.server_properties), "--ignore-formatted"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise ClusterError(f"formatting storage of node {n.node_id} failed:\n"
                               f"{(proc.stdout + proc.stderr)[-2000:]}")

    def _launch(self, n: Node, classpath: str) -> None:
        heap = self.config.local_cluster.heap
        agent = self.deps.ensure("jmx_agent")[0]
        cmd = [self._java(), f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC",
               "-XX:MaxGCPauseMillis=20", *self.config.local_cluster.jvm_options,
               "-Djava.awt.headless=true", f"-Dkafka.logs.dir={n.log_dir}",
               f"-Dlog4j2.configurationFile=file:{Path(n.home) / 'log4j2.properties'}",
               f"-javaagent:{agent}=127.0.0.1:{n.metrics_port}:{Path(n.home) / 'jmx-exporter.yaml'}",
               "-cp", classpath, "kafka.Kafka", str(n.server_properties)]
        out = open(n.log_dir / "stdout.log", "ab")
        env = {**os.environ, **self.node_env[n.node_id]} if n.node_id in self.node_env else None
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True,
                                preexec_fn=_die_with_parent if self.owner_bound else None)
        out.close()
        self._procs[n.node_id] = proc
        n.pid = proc.pid
        log.info("node %d started (pid %d, client %d, controller %d, metrics %d)",
                 n.node_id, proc.pid, n.client_port, n.controller_port, n.metrics_port)

    def start(self, *, fresh: bool = True, wait: bool = True) -> "LocalCluster":
        """Lay out (when fresh or new), format and start every node, then wait until ready."""
        if self.is_running():
            log.info("cluster '%s' from an earlier run is still up: stopping it first", self.name)
            self.stop()
        if fresh or not self.nodes:
            self._layout()
        classpath = self._classpath()
        for n in self.nodes:
            self._format(n, classpath)
        for n in self.nodes:
            self._launch(n, classpath)
        self._save_state()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Until every broker is in the cluster metadata and every node serves /metrics."""
        from confluent_kafka.admin import AdminClient

        timeout = timeout or self.config.local_cluster.ready_timeout_s
        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0,
                             "logger": logging.getLogger("infra.local_cluster.admin")})
        live = [n for n in self.nodes if not _pid_paused(n.pid)]
        want = {n.node_id for n in live if n.is_broker}
        last = "no answer yet"
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                md = admin.list_topics(timeout=5)
                seen = set(md.brokers)
                if want <= seen and all(self._metrics_ok(n) for n in live):
                    log.info("cluster '%s' ready: %d brokers at %s", self.name, len(seen),
                             self.bootstrap_servers)
                    return
                last = f"brokers in metadata: {sorted(seen)}, waiting for {sorted(want)}"
            except Exception as e:  # noqa: BLE001 - keep polling until the deadline
                last = str(e)
            time.sleep(0.5)
        raise ClusterError(f"cluster '{self.name}' not ready after {timeout:.0f}s ({last}); "
                           f"see {self.home}/node-*/logs/server.log")

    def _metrics_ok(self, n: Node) -> bool:
        try:
            with urllib.request.urlopen(n.metrics_url, timeout=5) as r:
                r.read()  # read it all: closing early makes the exporter log a broken pipe
                return r.status == 200
        except OSError:
            return False

    def _check_alive(self) -> None:
        for n in self.nodes:
            if n.pid and not _pid_alive(n.pid):
                tail = ""
                for f in ("stdout.log", "server.log"):
                    p = n.log_dir / f
                    if p.exists():
                        tail += p.read_text(errors="replace")[-1500:]
                raise ClusterError(f"node {n.node_id} exited during start-up; last log lines:\n{tail}")

    # ---- fault injection -----------------------------------------------------------
    def _signal(self, node_id: int, sig: int) -> Node:
        n = self.node(node_id)
        if not _pid_alive(n.pid):
            raise ClusterError(f"node {node_id} is not running")
        os.kill(n.pid, sig)
        return n

    def pause(self, node_id: int) -> None:
        """Freeze a broker (SIGSTOP): it holds its connections but answers nothing."""
        self._signal(node_id, signal.SIGSTOP)
        log.info("node %d paused", node_id)

    def resume(self, node_id: int) -> None:
        self._signal(node_id, signal.SIGCONT)
        log.info("node %d resumed", node_id)

    def kill(self, node_id: int) -> None:
        """SIGKILL one broker: a crash, no controlled shutdown."""
        n = self._signal(node_id, signal.SIGKILL)
        self._reap(n)
        log.info("node %d killed", node_id)

    def stop_node(self, node_id: int, timeout: float = 30) -> None:
        """Controlled shutdown of one broker (SIGTERM), SIGKILL after the timeout."""
        n = self.node(node_id)
        self._terminate([n], timeout)

    def restart(self, node_id: int) -> None:
        """Start a stopped or killed node again with its existing data (and its
        server.properties written again: `routes` may have changed)."""
        n = self.node(node_id)
        if _pid_alive(n.pid):
            self._terminate([n], 30)
        self._write_node_files(n)
        self._launch(n, self._classpath())
        self._save_state()

    # ---- stopping ------------------------------------------------------------------
    def _reap(self, n: Node, timeout: float = 10) -> None:
        proc = self._procs.pop(n.node_id, None)
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + timeout
        while _pid_alive(n.pid) and time.monotonic() < deadline:
            time.sleep(0.1)

    def _terminate(self, nodes: list[Node], timeout: float) -> None:
        live = [n for n in nodes if _pid_alive(n.pid)]
        for n in live:
            try:
                os.kill(n.pid, signal.SIGCONT)  # a paused JVM cannot handle SIGTERM
                os.kill(n.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while any(_pid_alive(n.pid) for n in live) and time.monotonic() < deadline:
            time.sleep(0.2)
        for n in live:
            if _pid_alive(n.pid):
                log.warning("node %d did not stop within %.0fs: killing it", n.node_id, timeout)
                try:
                    os.kill(n.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self._reap(n)

    def stop(self, timeout: float = 20) -> None:
        """Stop every node; safe to call again, or on a cluster that never started."""
        if self.nodes:
            self._terminate(self.nodes, timeout)
            for n in self.nodes:
                n.pid = None
            if self.home.exists():
                self._save_state()
        log.info("cluster '%s' stopped", self.name)

    def destroy(self) -> None:
        """Stop and remove every file of the cluster."""
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)

    def status(self) -> list[dict]:
        rows = []
        for n in self.nodes:
            state = ("paused" if _pid_paused(n.pid) else "running") if _pid_alive(n.pid) else "stopped"
            rows.append({"node": n.node_id, "state": state, "pid": n.pid if state != "stopped" else None,
                         "role": n.roles,
                         "bootstrap": n.bootstrap if n.is_broker else "-",
                         "metrics": n.metrics_url,
                         "request_log": str(n.request_log)})
        return rows

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
