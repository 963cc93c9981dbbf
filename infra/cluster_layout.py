"""What a local cluster's nodes are: their roles, ports and server.properties (no process).

Kept apart from `infra.local_cluster` (which starts and disturbs the JVMs) so the layout
can be read and tested on its own.

Roles. Nodes 1..brokers are brokers. With ``dedicated_controllers`` > 0 the KRaft quorum
runs on that many controller-only nodes after them (brokers+1, brokers+2, ...), as on a
fleet; otherwise the last ``controllers`` brokers (every broker when 0) are controllers
too, in combined mode. A controller-only node has no client listener: it is never in
bootstrap.servers and clients cannot reach it, but it writes server.log, controller.log
and a request log (the brokers' heartbeats and metadata fetches) and serves JMX.

Routes through a proxy (`Routes`, for matrix.mechanisms.delay_proxy). A node in
``advertised`` advertises another port than the one it listens on for clients and
replicas (a proxy in front of it). For its own outgoing replication to pass a proxy as
well, every broker then gets a second listener, REPLICATION, on a port of its own,
advertised at ``replication[b]`` (a proxy) or its own port; the proxied nodes use it as
their inter-broker listener, the others keep PLAINTEXT (and so reach the proxied node
through its advertised proxy). Controller traffic uses the CONTROLLER listener: never
proxied.

A client's own path through a proxy (`Routes.client_link`, for
matrix.mechanisms.slow_link): every broker gets a third listener, CLIENTLINK, on a port
of its own, advertised at ``client_link[b]`` (a proxy in front of it). Kafka answers a
client's metadata with the addresses of the listener it came in on, so a client that
bootstraps at the proxies reaches every broker through them and every other client and
replica takes the direct path.
"""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass, field
from pathlib import Path


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
    # "broker", "controller" or "broker,controller" (server.properties process.roles);
    # "" in the state of a cluster laid out before roles were kept: filled in on load.
    roles: str = ""
    replication_port: int = 0   # the REPLICATION listener's port, 0: none
    client_link_port: int = 0   # the CLIENTLINK listener's port, 0: none

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

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


@dataclass
class Routes:
    """Ports advertised instead of a node's own (see the module docstring)."""
    advertised: dict[int, int] = field(default_factory=dict)    # node -> PLAINTEXT port
    replication: dict[int, int] = field(default_factory=dict)   # node -> REPLICATION port
    client_link: dict[int, int] = field(default_factory=dict)   # node -> CLIENTLINK port

    def claim(self, kind: str, node: int, port: int) -> int:
        """`node`'s `kind` route (advertised, replication, client_link) set to `port`, and
        `port`. A route is set once per cluster: a second fault routing the same path would
        silently take it over from the first, whose proxy then sees no traffic."""
        routes = getattr(self, kind)
        if node in routes:
            raise ValueError(f"node {node}'s {kind} route is already taken (port "
                             f"{routes[node]}): two faults on one cluster route the same "
                             "path; give one of them a topology of its own")
        routes[node] = port
        return port

    @property
    def needs_replication_listener(self) -> bool:
        return bool(self.advertised) and bool(self.replication)

    @property
    def needs_client_link_listener(self) -> bool:
        return bool(self.client_link)


# Where free ports are looked for when the kernel's ephemeral range cannot be read.
EPHEMERAL_DEFAULT = (32768, 60999)
LOWEST_PORT = 10000


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """The ports the kernel hands out for bind(0) and outgoing connections."""
    try:
        lo, hi = (int(x) for x in Path(path).read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return EPHEMERAL_DEFAULT


def free_port(taken: set[int] = frozenset()) -> int:
    """A free port outside the kernel's ephemeral range: a node's ports are fixed in its
    server.properties, and while it is stopped an ephemeral one could be handed to any
    connection or listener of the host, which the node's clients would then reach."""
    lo, hi = ephemeral_range()
    ranges = [r for r in (range(LOWEST_PORT, lo), range(hi + 1, 65536)) if len(r) > 100]
    for _ in range(1000):
        port = random.choice(random.choice(ranges))
        if port not in taken and port_is_free(port):
            return port
    raise ClusterError(f"no free port found outside the ephemeral range {lo}-{hi}")


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def allocate_ports(count: int, per_node: int, base: int) -> list[tuple[int, ...]]:
    """`per_node` ports for each of `count` nodes: free ones outside the ephemeral range
    (base 0) or base + 100*k + i."""
    if base == 0:
        taken: set[int] = set()
        out = []
        for _ in range(count):
            group = []
            while len(group) < per_node:
                p = free_port(taken)
                taken.add(p)
                group.append(p)
            out.append(tuple(group))
        return out
    out = [tuple(base + 100 * k + i for k in range(per_node)) for i in range(count)]
    for group in out:
        for p in group:
            if p > 65535:
                raise ClusterError(f"port {p} out of range: lower local_cluster.base_port")
            if not port_is_free(p):
                raise ClusterError(
                    f"port {p} on 127.0.0.1 is busy: stop what uses it, or set "
                    f"local_cluster.base_port = 0 to let kmon pick free ports")
    return out


def node_roles(brokers: int, controllers: int, dedicated: int) -> list[str]:
    """process.roles of nodes 1..brokers+dedicated (see the module docstring)."""
    if dedicated:
        if controllers:
            raise ClusterError(f"local_cluster.controllers is {controllers} and "
                               f"local_cluster.dedicated_controllers is {dedicated}: set one")
        return ["broker"] * brokers + ["controller"] * dedicated
    if controllers > brokers:
        raise ClusterError(f"local_cluster.controllers is {controllers}, but the "
                           f"cluster has {brokers} nodes")
    combined = controllers or brokers
    return ["broker"] * (brokers - combined) + ["broker,controller"] * combined


def node_properties(n: Node, nodes: list[Node], routes: Routes,
                    extra: dict) -> dict[str, str]:
    """server.properties of node `n` in a cluster of `nodes`."""
    voters = ",".join(f"{m.node_id}@127.0.0.1:{m.controller_port}" for m in nodes
                      if m.is_controller)
    rf = str(min(3, sum(1 for m in nodes if m.is_broker)))
    min_isr = str(min(2, int(rf)))
    listeners, advertised = [], []
    if n.is_broker:
        listeners.append(f"PLAINTEXT://127.0.0.1:{n.client_port}")
        advertised.append(f"PLAINTEXT://127.0.0.1:{routes.advertised.get(n.node_id, n.client_port)}")
        if n.replication_port:
            listeners.append(f"REPLICATION://127.0.0.1:{n.replication_port}")
            port = routes.replication.get(n.node_id, n.replication_port)
            advertised.append(f"REPLICATION://127.0.0.1:{port}")
        if n.client_link_port:
            listeners.append(f"CLIENTLINK://127.0.0.1:{n.client_link_port}")
            port = routes.client_link.get(n.node_id, n.client_link_port)
            advertised.append(f"CLIENTLINK://127.0.0.1:{port}")
    if n.is_controller:
        listeners.append(f"CONTROLLER://127.0.0.1:{n.controller_port}")
    props = {
        "process.roles": n.roles,
        "node.id": str(n.node_id),
        "controller.quorum.voters": voters,
        "listeners": ",".join(listeners),
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,REPLICATION:PLAINTEXT,"
            "CLIENTLINK:PLAINTEXT",
        "log.dirs": str(n.data_dir),
    }
    if n.is_broker:
        behind_proxy = n.node_id in routes.advertised and n.replication_port
        props.update({
            "advertised.listeners": ",".join(advertised),
            "inter.broker.listener.name": "REPLICATION" if behind_proxy else "PLAINTEXT",
            "num.partitions": "3",
            "offsets.topic.replication.factor": rf,
            # Fewer __consumer_offsets partitions than the default 50: the local cluster
            # starts faster and each coordinator holds more groups, as on a busy broker.
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
        })
    props.update({k: str(v) for k, v in extra.items()})
    return props
