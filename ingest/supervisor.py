"""Run a set of agents in threads: start, restart after a crash, stop cleanly.

`AgentSupervisor` runs each agent's `run(stop, interval_s)` in its own thread. An agent
that raises is logged with its name and started again after a backoff (its positions are
on disk, so it resumes where it last flushed). `stop` sets the stop event, waits for each
agent's final drain, and closes them.

`embedded_agents` builds every agent kmon runs against a local cluster on this machine
(`kmon run` and `kmon demo`): the request log, the four broker logs and the JMX exporter
of every node, the __consumer_offsets reader, and the partition end offsets. Each agent
gets its own sink, so one agent's failed flush never touches another's records.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from prometheus_client import CollectorRegistry

from ingest.agent_metrics import AgentMetrics
from ingest.sinks import Sink

if TYPE_CHECKING:
    from ingest.request_log_agent import WindowSettings

log = logging.getLogger(__name__)


@dataclass
class Supervised:
    name: str
    agent: object            # has run(stop, interval_s) and close()
    interval_s: float
    thread: threading.Thread | None = None
    crashes: int = 0


@dataclass
class AgentSupervisor:
    agents: list[Supervised]
    restart_backoff_s: float = 5.0
    stop_event: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        for s in self.agents:
            s.thread = threading.Thread(target=self._run, args=(s,), name=f"agent-{s.name}",
                                        daemon=True)
            s.thread.start()
        log.info("started %d agents: %s", len(self.agents), ", ".join(a.name for a in self.agents))

    def _run(self, s: Supervised) -> None:
        while not self.stop_event.is_set():
            try:
                s.agent.run(self.stop_event, s.interval_s)
                return
            except Exception:  # noqa: BLE001 - an agent crash must not take the others down
                s.crashes += 1
                log.exception("agent %s crashed (%d so far); restarting in %.0fs", s.name,
                              s.crashes, self.restart_backoff_s)
                self.stop_event.wait(self.restart_backoff_s)

    def alive(self) -> dict[str, bool]:
        return {s.name: bool(s.thread and s.thread.is_alive()) for s in self.agents}

    def stop(self, timeout_s: float = 60.0) -> None:
        self.stop_event.set()
        deadline = time.monotonic() + timeout_s
        for s in self.agents:
            if s.thread:
                s.thread.join(max(0.1, deadline - time.monotonic()))
                if s.thread.is_alive():
                    log.warning("agent %s did not stop within %.0fs", s.name, timeout_s)
            try:
                s.agent.close()
            except Exception as e:  # noqa: BLE001
                log.warning("closing agent %s: %s", s.name, e)


@dataclass(frozen=True)
class BrokerHost:
    """What one broker exposes on this machine; None for what is not followed here."""
    broker: int
    request_log: Path | None = None
    log_dir: Path | None = None
    metrics_url: str | None = None


def build_agents(*, cluster_name: str, hosts: list[BrokerHost], offsets_client: dict | None,
                 sink_for: Callable[[str], Sink], state_dir: Path,
                 registry: CollectorRegistry, request_windows: WindowSettings,
                 clock: Callable[[], float] = time.time, jmx_interval_s: float = 10.0,
                 end_offsets_interval_s: float = 10.0) -> list[Supervised]:
    """One agent per kind of source that `hosts` name, plus the __consumer_offsets reader
    and the end-offsets agent when `offsets_client` (librdkafka settings) is given.
    `request_windows`: the request-log agent's window settings ([request_log],
    kmon/monitor.py `request_windows`)."""
    from ingest.broker_log_agent import BrokerLogAgent, broker_log_sources
    from ingest.file_tailer import PositionStore
    from ingest.jmx_scraper import JmxScraper, JmxSource
    from ingest.offsets_agent import OffsetsAgent
    from ingest.partition_offsets_agent import PartitionOffsetsAgent
    from ingest.request_log_agent import RequestLogAgent, RequestLogSource

    state_dir.mkdir(parents=True, exist_ok=True)
    out = []
    request_logs = [RequestLogSource(cluster_name, h.broker, Path(h.request_log))
                    for h in hosts if h.request_log]
    if request_logs:
        out.append(Supervised("request-log", RequestLogAgent(
            request_logs, sink_for("request-log"), PositionStore(state_dir / "request-log.json"),
            AgentMetrics(registry, "request-log"), clock, windows=request_windows), 1.0))
    broker_logs = [s for h in hosts if h.log_dir
                   for s in broker_log_sources(cluster_name, h.broker, h.log_dir)]
    if broker_logs:
        out.append(Supervised("broker-logs", BrokerLogAgent(
            broker_logs, sink_for("broker-logs"), PositionStore(state_dir / "broker-logs.json"),
            AgentMetrics(registry, "broker-logs"), clock), 1.0))
    endpoints = [JmxSource(cluster_name, h.broker, h.metrics_url) for h in hosts if h.metrics_url]
    if endpoints:
        out.append(Supervised("jmx", JmxScraper(endpoints, sink_for("jmx"),
                                                AgentMetrics(registry, "jmx"), clock),
                              jmx_interval_s))
    if offsets_client is not None:
        reader = OffsetsAgent(cluster_name, offsets_client, sink_for("offsets"),
                              state_dir / f"offsets-{cluster_name}.json",
                              AgentMetrics(registry, "offsets"), clock)
        ends = PartitionOffsetsAgent(cluster_name, offsets_client, sink_for("partition-offsets"),
                                     AgentMetrics(registry, "partition-offsets"),
                                     partitions=reader.committed_partitions, clock=clock,
                                     include_all_topics=True)
        out += [Supervised("offsets", reader, 1.0),
                Supervised("partition-offsets", ends, end_offsets_interval_s)]
    return out


def embedded_agents(*, cluster_name: str, nodes, bootstrap: str, client_config: dict,
                    sink_for: Callable[[str], Sink], state_dir: Path,
                    registry: CollectorRegistry, request_windows: WindowSettings,
                    clock: Callable[[], float] = time.time) -> list[Supervised]:
    """Every agent for brokers whose files are on this machine (`nodes`: LocalCluster nodes)."""
    hosts = [BrokerHost(n.node_id, n.request_log, n.log_dir, n.metrics_url) for n in nodes]
    return build_agents(cluster_name=cluster_name, hosts=hosts,
                        offsets_client={**client_config, "bootstrap.servers": bootstrap},
                        sink_for=sink_for, state_dir=state_dir, registry=registry, clock=clock,
                        request_windows=request_windows)
