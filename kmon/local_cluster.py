"""A real local Apache Kafka cluster (KRaft) on loopback.

Every node is a broker; the last ``local_cluster.controllers`` of them (all by default)
are KRaft controllers too, in combined mode.

Each node is a separate JVM started from the Apache jars resolved by `kmon.jvm_deps`,
with its own data and log folders under ``<work_dir>/clusters/<name>/node-<id>``:

- ``logs/kafka-request.log``: ``kafka.request.logger`` at DEBUG (every request's stage
  timings), apart from ``server.log``, ``controller.log``, ``state-change.log`` and
  ``log-cleaner.log``, all in Kafka's own layout ``[%d] %p %m (%c)%n``;
- the Prometheus JMX exporter java agent on its own port, with rules that keep the
  RequestMetrics stage histograms (see resources/jmx-exporter.yaml).

The cluster's layout, ports and process ids are kept in ``cluster.json`` so another
process (``kmon cluster status`` / ``down``) can find it. Nodes can be paused (SIGSTOP),
resumed, killed (SIGKILL), stopped and restarted one at a time for fault injection.

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
import socket
import subprocess
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from kmon.config import Config
from kmon.jvm_deps import JvmDeps

log = logging.getLogger(__name__)

RESOURCES = Path(__file__).parent / "resources"
LOG_LAYOUT = "[%d] %p %m (%c)%n"


class ClusterError(RuntimeError):
    """The local cluster could not be started, reached or stopped; the message says why."""


@dataclass
class Node:
    node_id: int
    client_port: int
    controller_port: int
    metrics_port: int
    home: str
    pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def log_dir(self) -> Path:
        return Path(self.home) / "logs"

    @property
    def data_dir(self) -> Path:
        return Path(self.home) / "data"

    @property
    def request_log(self) -> Path:
        return self.log_dir / "kafka-request.log"

    @property
    def server_properties(self) -> Path:
        return Path(self.home) / "server.properties"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _proc_state(pid: int | None) -> str | None:
    """The state letter from /proc/<pid>/stat (R, S, T, Z, ...), None if there is no such pid."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def _pid_alive(pid: int | None) -> bool:
    return _proc_state(pid) not in (None, "Z", "X")


def _pid_paused(pid: int | None) -> bool:
    return _proc_state(pid) in ("T", "t")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kafka_uuid() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class LocalCluster:
    """Start, inspect, disturb and stop a local KRaft cluster."""

    def __init__(self, config: Config, jvm_deps: JvmDeps | None = None, *, name: str | None = None,
                 brokers: int | None = None, owner_bound: bool = False, log_roll_mb: int = 100):
        self.config = config
        self.deps = jvm_deps or JvmDeps(config.work_dir, config.jvm.maven_repo, config.jvm.offline)
        self.name = name or config.local_cluster.name
        self.size = brokers or config.local_cluster.brokers
        self.controllers = config.local_cluster.controllers   # 0: every node
        self.owner_bound = owner_bound
        self.log_roll_mb = log_roll_mb
        self.home = config.work_dir / "clusters" / self.name
        self.state_file = self.home / "cluster.json"
        self.nodes: list[Node] = []
        self.cluster_id: str | None = None
        self._procs: dict[int, subprocess.Popen] = {}
        if self.state_file.exists():
            self._load_state()

    # ---- state ---------------------------------------------------------------------
    def _load_state(self) -> None:
        state = json.loads(self.state_file.read_text())
        self.cluster_id = state["cluster_id"]
        self.nodes = [Node(**n) for n in state["nodes"]]
        self.size = len(self.nodes)

    def _save_state(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"name": self.name, "cluster_id": self.cluster_id,
                                   "nodes": [asdict(n) for n in self.nodes]}, indent=2))
        tmp.replace(self.state_file)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def node(self, node_id: int) -> Node:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise ClusterError(f"cluster '{self.name}' has no node {node_id} "
                           f"(nodes: {', '.join(str(n.node_id) for n in self.nodes)})")

    def is_running(self) -> bool:
        return any(_pid_alive(n.pid) for n in self.nodes)

    # ---- layout --------------------------------------------------------------------
    def _allocate_ports(self) -> list[tuple[int, int, int]]:
        base = self.config.local_cluster.base_port
        if base == 0:
            ports: set[int] = set()
            out = []
            for _ in range(self.size):
                trio = []
                while len(trio) < 3:
                    p = _free_port()
                    if p not in ports:
                        ports.add(p)
                        trio.append(p)
                out.append(tuple(trio))
            return out
        out = [(base + i, base + 100 + i, base + 200 + i) for i in range(self.size)]
        for trio in out:
            for p in trio:
                if p > 65535:
                    raise ClusterError(f"port {p} out of range: lower local_cluster.base_port")
                if not _port_is_free(p):
                    raise ClusterError(
                        f"port {p} on 127.0.0.1 is busy: stop what uses it, or set "
                        f"local_cluster.base_port = 0 to let kmon pick free ports")
        return out

    def _layout(self) -> None:
        if self.home.exists():
            shutil.rmtree(self.home)
        self.home.mkdir(parents=True)
        self.cluster_id = _kafka_uuid()
        self.nodes = [Node(i + 1, c, k, m, str(self.home / f"node-{i + 1}"))
                      for i, (c, k, m) in enumerate(self._allocate_ports())]
        for n in self.nodes:
            n.log_dir.mkdir(parents=True)
            n.data_dir.mkdir(parents=True)
            self._write_node_files(n)
        self._save_state()

    def controller_ids(self) -> list[int]:
        """The nodes that are KRaft controllers too: the last `controllers` of them."""
        if self.controllers > len(self.nodes):
            raise ClusterError(f"local_cluster.controllers is {self.controllers}, but the "
                               f"cluster has {len(self.nodes)} nodes")
        return [n.node_id for n in self.nodes[len(self.nodes) - (self.controllers or
                                                                 len(self.nodes)):]]

    def _broker_properties(self, n: Node) -> dict[str, str]:
        controllers = self.controller_ids()
        voters = ",".join(f"{m.node_id}@127.0.0.1:{m.controller_port}" for m in self.nodes
                          if m.node_id in controllers)
        is_controller = n.node_id in controllers
        listeners = f"PLAINTEXT://127.0.0.1:{n.client_port}"
        if is_controller:
            listeners += f",CONTROLLER://127.0.0.1:{n.controller_port}"
        rf = min(3, self.size)
        props = {
            "process.roles": "broker,controller" if is_controller else "broker",
            "node.id": str(n.node_id),
            "controller.quorum.voters": voters,
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{n.client_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(n.data_dir),
            "num.partitions": "3",
            "offsets.topic.replication.factor": str(rf),
            # Fewer __consumer_offsets partitions than the default 50: the local cluster
            # starts faster and each coordinator holds more groups, as on a busy broker.
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(min(2, rf)),
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": str(min(2, rf)),
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update({k: str(v) for k, v in self.config.local_cluster.extra_broker_config.items()})
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
        cmd = [self._java(), "-cp", classpath,
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
               "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
               f"-Dkafka.logs.dir={n.log_dir}",
               f"-Dlog4j2.configurationFile=file:{Path(n.home) / 'log4j2.properties'}",
               f"-javaagent:{agent}=127.0.0.1:{n.metrics_port}:{Path(n.home) / 'jmx-exporter.yaml'}",
               "-cp", classpath, "kafka.Kafka", str(n.server_properties)]
        out = open(n.log_dir / "stdout.log", "ab")
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True,
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
        """Until every node is in the cluster metadata and serves /metrics."""
        from confluent_kafka.admin import AdminClient

        timeout = timeout or self.config.local_cluster.ready_timeout_s
        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0,
                             "logger": logging.getLogger("kmon.local_cluster.admin")})
        want = {n.node_id for n in self.nodes if not _pid_paused(n.pid)}
        last = "no answer yet"
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                md = admin.list_topics(timeout=5)
                seen = set(md.brokers)
                if want <= seen and all(self._metrics_ok(self.node(i)) for i in want):
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
        """Start a stopped or killed broker again with its existing data."""
        n = self.node(node_id)
        if _pid_alive(n.pid):
            self._terminate([n], 30)
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
                         "bootstrap": n.bootstrap, "metrics": n.metrics_url,
                         "request_log": str(n.request_log)})
        return rows

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
