"""A slow broker by network: every byte to and from one broker delayed 150-400 ms each way.

Mechanism. The kernel has no netem, so a `DelayProxy` (matrix.mechanisms.delay_proxy)
sits in the broker's path: the broker advertises the proxy's port for PLAINTEXT (clients
and the other brokers' follower fetches reach it through the proxy), and its own follower
fetches go to the other brokers' REPLICATION listeners, advertised at proxies too (see
infra.cluster_layout.Routes). KRaft controller traffic is not proxied: the broker keeps
its heartbeats and stays registered. Delay 0 is a pass-through, so the proxies stay for
the cluster's life and `inject` only turns the delay on, `heal` off.

The runner must route the cluster before it starts (the ports are fixed in
server.properties): `fault.install(cluster)` before `cluster.start()`, and
`fault.uninstall()` after `cluster.stop()`. Without that, `prepare` routes only the
broker's inbound path and restarts that one broker (its own fetches are then direct,
so the other leaders see a much weaker slow follower), waiting for full ISRs again.

What a correct monitor finds, and why. The broker's requests take the delay twice (in and
out) in the clients' view but its request log's stage times do not show the wire: the
leaders it follows wait for its fetches (Remote time of acks=all Produce), and its own
acks=all Produce waits for the others' fetches through its proxy. Expected: slow_broker on
broker:<id>, as the slow follower or with a cause of its own (the delay lands in response
send / network threads as well). Explained: the other brokers as victims of the slow
follower (remote_produce_slow_follower).
"""

from __future__ import annotations

import logging

from demo.faults.base import FaultContext, FaultRun, now_ms, wait_for
from matrix.fault import COMMITS_RETRIED, MatrixFault
from matrix.mechanisms.delay_proxy import DelayProxy, hold_delay
from matrix.mechanisms.demo_faults import culprit, victims
from matrix.truth import Expect

log = logging.getLogger(__name__)



class DelayedBroker(MatrixFault):
    name = "delayed_broker"
    title = "network delay to one broker (delaying proxy)"
    fault_class = "slow_broker"
    runs_until_detected = True

    def __init__(self, broker: int = 2, delay_ms: float = 250.0, bandwidth_bytes_s: float = 0.0,
                 duration_s: float = 240.0):
        self.broker, self.delay_ms = broker, delay_ms
        self.bandwidth_bytes_s, self.duration_s = bandwidth_bytes_s, duration_s
        self.proxy: DelayProxy | None = None
        self.replication_routed = False

    # ---- routing (before the cluster starts) ---------------------------------------------
    def install(self, cluster) -> None:
        """Put the proxy in the broker's path; call before `cluster.start()` (fresh)."""
        if self.proxy is not None:
            return
        proxy = DelayProxy()
        ids = range(1, cluster.size + 1)       # brokers are 1..size (controllers after)
        cluster.routes.claim("advertised", self.broker,
                             proxy.add_route(self._port_of(cluster, self.broker)))
        for other in ids:
            if other != self.broker:
                cluster.routes.claim("replication", other, proxy.add_route(
                    self._port_of(cluster, other, replication=True)))
        self.proxy = proxy.start()
        self.replication_routed = True

    def uninstall(self) -> None:
        """Stop the proxy; after `cluster.stop()` (the broker cannot be reached without it)."""
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None

    @staticmethod
    def _port_of(cluster, node_id: int, replication: bool = False):
        def target() -> tuple[str, int]:
            n = cluster.node(node_id)
            return "127.0.0.1", n.replication_port if replication else n.client_port
        return target

    # ---- the fault -------------------------------------------------------------------------
    def prepare(self, ctx: FaultContext) -> None:
        if self.proxy is not None:
            return
        cl = ctx.cluster
        ctx.say(f"routing broker {self.broker} through a delay proxy (restarting it)")
        proxy = DelayProxy()
        cl.routes.advertised[self.broker] = proxy.add_route(self._port_of(cl, self.broker))
        self.proxy = proxy.start()
        cl.restart(self.broker)
        cl.wait_ready()
        wait_for("full ISRs after the restart", lambda: self._isr_full(ctx), 90, ctx)

    def inject(self, ctx: FaultContext, run: FaultRun, until=None) -> None:
        """Delay on until `until()` (found) or duration_s; then off (heal)."""
        if self.proxy is None:
            raise RuntimeError("DelayedBroker: install(cluster) before start, or prepare()")
        ctx.say(f"delaying broker {self.broker}'s network by {self.delay_ms:.0f} ms each way")
        self.proxy.set_bandwidth(self.bandwidth_bytes_s)
        self.proxy.set_delay(self.delay_ms)
        run.fault_ms = now_ms()
        run.notes.update(broker=self.broker, delay_ms=self.delay_ms,
                         bandwidth_bytes_s=self.bandwidth_bytes_s,
                         replication_routed=self.replication_routed)
        hold_delay(ctx, run, self.proxy, self.duration_s, until, lambda: self.heal(ctx))

    def heal(self, ctx: FaultContext) -> None:
        if self.proxy is not None:
            self.proxy.set_delay(0)
            self.proxy.set_bandwidth(0)

    def _isr_full(self, ctx: FaultContext) -> bool:
        md = ctx.admin().list_topics(timeout=5)
        return all(len(p.isrs) == len(p.replicas) for t in md.topics.values()
                   for p in t.partitions.values())

    # ---- ground truth ----------------------------------------------------------------------
    def expect(self) -> tuple[Expect, ...]:
        return (culprit(self.broker, f"delayed broker {self.broker}"),)

    def explained(self) -> tuple[Expect, ...]:
        return (victims(self.broker, "leaders held back by it"), COMMITS_RETRIED)
