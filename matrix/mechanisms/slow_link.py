"""A slow producer link: one producer's own path to the cluster delayed, nobody else's.

Mechanism. Every broker has a CLIENTLINK listener advertised at a `DelayProxy` port
(infra.cluster_layout.Routes.client_link); the producer bootstraps at those proxies, so
the metadata it gets names the proxies too and every byte it sends or receives takes the
delay, at every broker. The workload's other clients and the replicas keep the direct
path. Delay 0 is a pass-through: the proxy stays for the cluster's life and `inject`
only turns the delay on, `heal` off. As for the delayed broker, the runner installs it
before the cluster starts (`install(cluster)`); the ports are in server.properties.

What a correct monitor finds, and why. The brokers serve the producer's requests as fast
as anyone's: the request log's timer starts once a request has arrived and stops when
its response is handed to the socket, so no stage shows the wire. Only the producer's
librdkafka statistics do: its rtt to every broker is the delay twice over the brokers'
Produce time, while the workload's producers (the peers) stay fast. Expected: slow_client
on client:<client_id>, cause client_slow_link; no broker finding. The workload's clients
must ship their statistics (MatrixSettings.client_stats).

The delay: 300 ms each way, a 600 ms round trip. The rule subtracts the broker's Produce
TP99 over all its clients from the producer's rtt p99, and on this loaded 2-core host
healthy acks=all Produce TP99s reach 100-250 ms; 200 ms each way left the link's share
too close to the 300 ms threshold to tell.
"""

from __future__ import annotations

from demo.faults.base import FaultContext, FaultRun, now_ms
from matrix.fault import MatrixFault
from matrix.mechanisms.delay_proxy import DelayProxy, hold_delay
from matrix.mechanisms.rewind_clients import stop_producer
from matrix.truth import Expect


class SlowProducerLink(MatrixFault):
    name = "slow_producer_link"
    title = "a slow producer link (a delaying proxy on one producer's path)"
    fault_class = "slow_client"
    runs_until_detected = True

    def __init__(self, client_id: str = "far-producer", topic: str = "far-writes",
                 delay_ms: float = 300.0, rate_per_s: float = 20.0, duration_s: float = 180.0):
        self.client_id, self.topic = client_id, topic
        self.delay_ms, self.rate_per_s, self.duration_s = delay_ms, rate_per_s, duration_s
        self.proxy: DelayProxy | None = None

    # ---- routing (before the cluster starts) ---------------------------------------------
    def install(self, cluster) -> None:
        """A proxy route in front of every broker's CLIENTLINK listener; before
        `cluster.start()` (fresh)."""
        if self.proxy is not None:
            return
        proxy = DelayProxy()
        for b in range(1, cluster.size + 1):       # brokers are 1..size (controllers after)
            cluster.routes.claim("client_link", b, proxy.add_route(self._port_of(cluster, b)))
        self.proxy = proxy.start()

    def uninstall(self) -> None:
        """Stop the proxy; after `cluster.stop()`."""
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None

    @staticmethod
    def _port_of(cluster, node_id: int):
        def target() -> tuple[str, int]:
            return "127.0.0.1", cluster.node(node_id).client_link_port
        return target

    def bootstrap(self, cluster) -> str:
        """The producer's bootstrap: the proxies."""
        return ",".join(f"127.0.0.1:{p}" for _, p in sorted(cluster.routes.client_link.items()))

    # ---- the fault -------------------------------------------------------------------------
    def prepare(self, ctx: FaultContext) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import ProducerSpec, create_topics

        if self.proxy is None:
            raise RuntimeError("SlowProducerLink: install(cluster) before the cluster starts")
        create_topics(ctx.bootstrap, [NewTopic(self.topic, 3, 3)])
        ctx.workload.start_producer(ProducerSpec(self.client_id, self.topic, self.rate_per_s,
                                                 acks="all",
                                                 bootstrap=self.bootstrap(ctx.cluster)))

    def inject(self, ctx: FaultContext, run: FaultRun, until=None) -> None:
        """Delay on until `until()` (found) or duration_s; then off (heal)."""
        ctx.say(f"delaying {self.client_id}'s own path to every broker by "
                f"{self.delay_ms:.0f} ms each way")
        self.proxy.set_delay(self.delay_ms)
        run.fault_ms = now_ms()
        run.notes.update(client_id=self.client_id, delay_ms=self.delay_ms,
                         brokers=sorted(ctx.cluster.routes.client_link))
        hold_delay(ctx, run, self.proxy, self.duration_s, until, lambda: self.heal(ctx))

    def heal(self, ctx: FaultContext) -> None:
        if self.proxy is not None:
            self.proxy.set_delay(0)
        stop_producer(ctx, self.client_id)   # its topic's traffic ends with the scenario

    # ---- ground truth ----------------------------------------------------------------------
    def expect(self) -> tuple[Expect, ...]:
        return (Expect(f"slow link of {self.client_id}", "slow_client",
                       f"client:{self.client_id}", ("client_slow_link",)),)
