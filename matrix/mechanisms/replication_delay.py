"""A follower whose path to its leaders is slow, and nothing else about it.

A broker's own fetches from the leaders it follows cross a slow link (a congested or
failing switch port, a cross-zone path, a NIC dropping packets: the grey failures
between broker pairs that KIP-736 asks to measure), while its clients and the followers
fetching from it reach it as fast as ever. Every acks=all Produce on a leader it follows
waits for its fetch (Remote time): a follower that lags but stays in the ISR sets the
tail latency of every such write (KIP-250, KAFKA-6477). The broker's own request stages
are fine, so a correct monitor blames it as the slow follower, not by a stage of its own.

How: two `DelayProxy`s installed before the cluster starts. One sits in front of the
broker's client port and never delays (the broker must be behind a proxy to use its own
REPLICATION listener for its outgoing fetches: infra.cluster_layout.Routes); the other
sits in front of the other brokers' REPLICATION listeners, which only this broker uses,
and delays them from `inject` until the finding arrives or duration_s. One such fault per
topology: the other brokers' REPLICATION routes are its own.

Expected: slow_broker on the broker, cause slow_follower. Explained: the leaders held back
by it (remote_produce_slow_follower) and retried commits (the coordinators' appends wait
for it too).
"""

from __future__ import annotations

from demo.faults.base import FaultContext, FaultRun, now_ms
from matrix.fault import COMMITS_RETRIED, MatrixFault
from matrix.mechanisms.delay_proxy import DelayProxy, hold_delay
from matrix.mechanisms.delayed_broker import DelayedBroker
from matrix.mechanisms.demo_faults import victims
from matrix.truth import Expect


class DelayedFollowerFetches(MatrixFault):
    name = "delayed_follower_fetches"
    title = "slow broker (its fetches from its leaders delayed, nothing else)"
    fault_class = "slow_broker"
    runs_until_detected = True

    def __init__(self, broker: int = 1, delay_ms: float = 300.0, duration_s: float = 240.0):
        self.broker, self.delay_ms, self.duration_s = broker, delay_ms, duration_s
        self.inbound: DelayProxy | None = None    # in front of the broker: never delays
        self.proxy: DelayProxy | None = None      # on its way to the leaders: the fault

    def install(self, cluster) -> None:
        """Route the cluster; before `cluster.start()` (fresh)."""
        if self.proxy is not None:
            return
        port_of = DelayedBroker._port_of
        inbound, outbound = DelayProxy(), DelayProxy()
        cluster.routes.claim("advertised", self.broker,
                             inbound.add_route(port_of(cluster, self.broker)))
        for other in range(1, cluster.size + 1):    # brokers are 1..size
            if other != self.broker:
                cluster.routes.claim("replication", other, outbound.add_route(
                    port_of(cluster, other, replication=True)))
        self.inbound, self.proxy = inbound.start(), outbound.start()

    def uninstall(self) -> None:
        """Stop the proxies; after `cluster.stop()`."""
        for proxy in (self.proxy, self.inbound):
            if proxy is not None:
                proxy.stop()
        self.proxy = self.inbound = None

    def expect(self) -> tuple[Expect, ...]:
        return (Expect(f"broker {self.broker}, the slow follower", "slow_broker",
                       f"broker:{self.broker}", ("slow_follower",)),)

    def explained(self) -> tuple[Expect, ...]:
        return (victims(self.broker, f"leaders waiting on broker {self.broker}"),
                COMMITS_RETRIED)

    def inject(self, ctx: FaultContext, run: FaultRun, until=None) -> None:
        if self.proxy is None:
            raise RuntimeError("DelayedFollowerFetches: install(cluster) before it starts")
        ctx.say(f"delaying broker {self.broker}'s fetches from its leaders by "
                f"{self.delay_ms:.0f} ms each way")
        self.proxy.set_delay(self.delay_ms)
        run.fault_ms = now_ms()
        run.notes.update(broker=self.broker, delay_ms=self.delay_ms, path="replication only")
        hold_delay(ctx, run, self.proxy, self.duration_s, until, lambda: self.heal(ctx))

    def heal(self, ctx: FaultContext) -> None:
        if self.proxy is not None:
            self.proxy.set_delay(0)
