"""A simulated fleet: what the request-log agents of N brokers ship (windows).

Issue 24: kmon must keep up with a 2,000-broker cluster, and no machine here runs one. This
writes the records such a fleet's agents would send, per 10-s window, into a landing
folder (the embedded mode's transport; `LandingSink`), with faults at known times as the
ground truth:

- **Shapes from real request logs.** The templates are real window records: a corpus
  recording's request logs (default bursty-3b: 3 brokers under load, Kafka 4.3.1) run
  through the real agent aggregation (ingest/request_windows.py). Each simulated broker
  and window takes, per request key, one of the recorded windows of that key (a
  different one per broker and window), with its histograms, sums and counts scaled to
  `rate` requests per second per broker (the recorded key mix kept); max stays as
  recorded. So a fleet window holds brokers x keys request-window records, each as large
  as a real one. Only healthy recorded windows are taken (judged p99 under 100 ms): a
  recording's restart or burst would be a fault nobody injected. A key's windows are as
  frequent as in the recording (rare APIs stay rare), except the data path's (Produce and
  Fetch keys), which every broker serves in every window: at 10,000 requests/s a leader's
  acks=all producers do not pause for 10 s, while the recording, at 1/169 of that rate,
  had no acks=all Produce in 23 % of its windows (the 2,000-broker runs then lost a slow
  follower's victims in a window now and then, a simulator artefact).
- **Follower connections by replica placement.** Each broker leads partitions whose
  replicas sit on the next `rf - 1` brokers (ring placement, as a rack-unaware
  assignment spreads them): leader b gets a follower_fetch_windows row per follower,
  from a recorded follower row, its requests scaled.
- **Clients.** The recorded client_send_windows rows of the key, renamed per broker
  (`<client>-<broker mod clients>`), counts scaled.
- **Exemplars** as the recorded windows kept them (the slowest per key and window, the
  slow ones, errors, the 1-in-N sample), renamed to the simulated broker. Not scaled with
  the request rate: the recording's 1-in-1,000 sample becomes about one request in
  160,000 at 10,000 requests/s, what a fleet should set `request_log.exemplar_sample_every`
  to (the default 1,000 would ship 10 requests/s whole per broker).
- **Faults** (`Fault`): from `start_ms` to `end_ms`,
  - ``slow_broker``: every Produce request of the broker spends `delay_ms` more in
    `stage` (default local: a slow disk), and so in total (each histogram bucket moved
    to the bucket of its value plus the delay);
  - ``slow_follower``: the broker's fetches as a follower come `delay_ms` apart (its
    leaders' longest fetch gap), and every acks=-1 Produce of each leader it follows
    waits that much more in Remote (they wait for it);
  - ``slow_client``: client `client_id` reads its responses slowly: at every broker it
    reads from, each takes `delay_ms` more to send (a slow reader is slow everywhere;
    `broker` is one of them).

Record ids follow the agent's scheme (cluster, broker, key, window, emission), so a
window written twice is dropped by silver as a repeat. Deterministic: the same arguments
give the same records.

Run: .kmon/venv/bin/python -m bench.fleet_sim --brokers 100 --windows 6 --out DIR
"""

from __future__ import annotations

import argparse
import lzma
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from core.latency_histogram import bucket_of, quantile_of_arrays, value_of
from core.signals import judged_ms, waits_in_purgatory
from ingest.request_log import parse_request_line
from ingest.request_window_records import STAGES
from ingest.request_windows import WindowAggregator
from ingest.sinks import LandingSink

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RECORDING = ROOT / "tests" / "corpus" / "bursty-3b"
WINDOW_MS = 10_000
FAULT_KINDS = ("slow_broker", "slow_follower", "slow_client")
# Request keys of these APIs are in every broker's every window (module docstring).
DATA_PATH_APIS = ("Produce", "Fetch")
HEALTHY_P99_MS = 100.0


@dataclass(frozen=True)
class Fault:
    kind: str
    broker: int
    start_ms: int
    end_ms: int
    delay_ms: float = 600.0
    stage: str = "local"
    client_id: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind {self.kind!r}: one of {', '.join(FAULT_KINDS)}")
        if self.stage not in STAGES:
            raise ValueError(f"fault stage {self.stage!r}: one of {', '.join(STAGES)}")

    def active(self, window_start_ms: int) -> bool:
        return self.start_ms <= window_start_ms < self.end_ms


@dataclass
class Templates:
    """Recorded window records: per request key the request windows (with their clients
    and exemplars), and the follower rows."""
    windows: dict[str, list[dict]]
    clients: dict[str, list[list[dict]]]       # key -> per window, its client rows
    exemplars: dict[str, list[list[dict]]]     # key -> per window, its exemplars
    followers: list[dict]
    windows_recorded: int                      # (broker, window) pairs of the recording

    def presence(self, key: str) -> float:
        """The share of a simulated broker's windows that hold the key: as recorded (rare
        APIs stay rare), every window for the data path's keys (module docstring)."""
        if key.split(":")[0] in DATA_PATH_APIS:
            return 1.0
        return min(1.0, len(self.windows[key]) / max(1, self.windows_recorded))

    @property
    def requests_per_window(self) -> float:
        """A simulated broker window's mean requests, unscaled: each key's mean recorded
        window, as often as the key is present."""
        return sum(self.presence(k) * sum(r["requests"] for r in ws) / len(ws)
                   for k, ws in self.windows.items())


def templates_from_recording(recording: Path = DEFAULT_RECORDING) -> Templates:
    """Run each broker's recorded request log through the agent's aggregation."""
    windows: dict[str, list[dict]] = {}
    clients: dict[str, list[list[dict]]] = {}
    exemplars: dict[str, list[list[dict]]] = {}
    followers: list[dict] = []
    n_windows = 0
    for node in sorted((recording / "raw").glob("node-*")):
        packed = node / "kafka-request.log.xz"
        if not packed.exists():
            continue
        broker = int(node.name.split("-")[1])
        agg = WindowAggregator("rec", broker, window_ms=WINDOW_MS)
        offset = 0
        outputs = []
        for raw in lzma.decompress(packed.read_bytes()).splitlines(keepends=True):
            rec = parse_request_line(raw.rstrip(b"\n"), cluster="rec", broker=broker)
            if isinstance(rec, dict):
                agg.add(rec, (1, offset))
                outputs += agg.ready()
            offset += len(raw)
        outputs += agg.flush_all()
        by_window: dict[str, list] = {}
        for o in outputs:
            r = o.record
            if o.stream == "request_windows":
                if r["is_controller_traffic"] or r["emission"] or not _healthy(r):
                    continue
                windows.setdefault(r["key"], []).append(r)
                by_window[r["record_id"]] = [[], []]
            elif o.stream == "follower_fetch_windows" and not r["emission"]:
                followers.append(r)
        for o in outputs:
            r = o.record
            wid = (r["record_id"].rsplit(":client=", 1)[0].removesuffix(":other")
                   if o.stream == "client_send_windows" else r.get("window_id"))
            if wid in by_window:
                by_window[wid][0 if o.stream == "client_send_windows" else 1].append(r)
        for r in (o.record for o in outputs if o.stream == "request_windows"):
            if r["record_id"] in by_window:
                cs, ex = by_window[r["record_id"]]
                clients.setdefault(r["key"], []).append(cs)
                exemplars.setdefault(r["key"], []).append(ex)
        n_windows += len({o.record["ts_ms"] for o in outputs if o.stream == "request_windows"})
    if not windows:
        raise ValueError(f"{recording}: no request-log lines to take window shapes from")
    return Templates(windows, clients, exemplars, followers, n_windows)


def _healthy(rec: dict) -> bool:
    """A recorded window no slow-broker rule would look at twice: its judged p99 (total,
    or total - remote for the APIs that wait in Remote on purpose) well under the 300-ms
    threshold. A recording's restart or burst stays out of the healthy fleet; the faults
    are the simulator's own."""
    stage = "total_minus_remote" if waits_in_purgatory(rec["api"]) else "total"
    p99 = quantile_of_arrays(rec[f"{stage}_buckets"], rec[f"{stage}_counts"], 0.99)
    return p99 is None or p99 < HEALTHY_P99_MS


def _judged(e: dict) -> float:
    """An exemplar's latency as the agent ranks the slowest (core.signals.judged_ms)."""
    return judged_ms(e["api"], e["total_ms"], e["remote_ms"])


def _unit(b: int, w: int, key: str) -> float:
    """A deterministic number in [0, 1) per broker, window and key."""
    h = zlib.crc32(f"{b}:{w}:{key}".encode())
    return h / 2**32


def _delayed(ids: list[int], counts: list[int], delay_ms: float) -> tuple[list[int], list[int]]:
    """The histogram of every value plus `delay_ms` (a bucket's value stands for its
    values; buckets that meet are summed)."""
    out: dict[int, int] = {}
    for i, c in zip(ids, counts):
        j = bucket_of(value_of(i) + delay_ms)
        out[j] = out.get(j, 0) + c
    keys = sorted(out)
    return keys, [out[k] for k in keys]


def _scaled(counts: list[int], k: int) -> list[int]:
    return [c * k for c in counts]


def _slow_stages(rec: dict, stages: Iterable[str], delay_ms: float,
                 prefix: str = "") -> None:
    for s in stages:
        h = f"{prefix}{s}"
        rec[f"{h}_buckets"], rec[f"{h}_counts"] = _delayed(rec[f"{h}_buckets"],
                                                           rec[f"{h}_counts"], delay_ms)
        if f"{h}_sum_ms" in rec:                  # client and follower rows have no sum
            rec[f"{h}_sum_ms"] = rec[f"{h}_sum_ms"] + delay_ms * rec["requests"]
        rec[f"{h}_max_ms"] = rec[f"{h}_max_ms"] + delay_ms


class FleetSim:
    """The records of `brokers` brokers' agents, window by window (module docstring)."""

    def __init__(self, templates: Templates, brokers: int, *, cluster: str = "fleet",
                 rate: float = 10_000.0, rf: int = 3, client_names: int = 50,
                 faults: Iterable[Fault] = (), exemplar_slowest: int | None = None,
                 top_clients: int | None = None):
        if brokers < 1:
            raise ValueError("brokers must be at least 1")
        self.t, self.brokers, self.cluster = templates, brokers, cluster
        # An integer factor: every count times it, so each histogram still sums to its
        # row's requests, as the agent's do.
        self.scale = max(1, round(rate * WINDOW_MS / 1000 / templates.requests_per_window))
        self.rf, self.client_names = min(rf, brokers), client_names
        self.faults = tuple(faults)
        # The agent's request_log.exemplar_slowest / top_clients for the fleet (None: as
        # the recording's agent had them, 5 and 20): fewer of the slowest requests whole,
        # fewer clients on rows of their own (the rest summed into the `other` row).
        self.exemplar_slowest, self.top_clients = exemplar_slowest, top_clients
        self.requests_written = 0          # the requests of the windows `write` wrote
        for f in self.faults:
            if not 0 <= f.broker < brokers:
                raise ValueError(f"fault on broker {f.broker}: the fleet has 0..{brokers - 1}")

    def _faults(self, kind: str, start: int) -> list[Fault]:
        return [f for f in self.faults if f.kind == kind and f.active(start)]

    def window(self, start_ms: int) -> dict[str, list[dict]]:
        """Every record of the fleet's window starting at `start_ms` (on the 10-s grid)."""
        if start_ms % WINDOW_MS:
            raise ValueError(f"window start {start_ms} is not on the {WINDOW_MS}-ms grid")
        w = start_ms // WINDOW_MS
        out: dict[str, list[dict]] = {"request_windows": [], "follower_fetch_windows": [],
                                      "client_send_windows": [], "request_exemplars": []}
        slow = {f.broker: f for f in self._faults("slow_broker", start_ms)}
        lagging = {f.broker: f for f in self._faults("slow_follower", start_ms)}
        slow_clients = {f.client_id: f for f in self._faults("slow_client", start_ms)}
        for b in range(self.brokers):
            followers = [(b + k) % self.brokers for k in range(1, self.rf)]
            held = max((lagging[f].delay_ms for f in followers if f in lagging), default=None)
            for key, recs in self.t.windows.items():
                i = (b * 7919 + w) % len(recs)
                if _unit(b, w, key) >= self.t.presence(key):
                    continue
                self._request_window(out, b, key, i, start_ms, slow.get(b), held,
                                     slow_clients)
            for f in followers:
                tmpl = self.t.followers[(b * 31 + f + w) % len(self.t.followers)]
                rec = {**tmpl, "cluster": self.cluster, "broker": b, "ts_ms": start_ms,
                       "follower": f, "requests": tmpl["requests"] * self.scale,
                       "send_counts": _scaled(tmpl["send_counts"], self.scale)}
                if f in lagging:
                    gap = tmpl["max_fetch_gap_ms"] or 500.0
                    rec["max_fetch_gap_ms"] = gap + lagging[f].delay_ms
                rec["record_id"] = f"{self.cluster}:{b}:follower:{f}:{start_ms}:0"
                out["follower_fetch_windows"].append(rec)
        return out

    def _request_window(self, out, b: int, key: str, i: int, start: int,
                        slow: Fault | None, held: float | None,
                        slow_clients: dict[str | None, Fault]):
        tmpl = self.t.windows[key][i]
        s = self.scale
        rec = {**tmpl, "cluster": self.cluster, "broker": b, "ts_ms": start, "emission": 0}
        for c in ("requests", "errors", "request_bytes", "response_bytes", "over_threshold",
                  "exemplars_slow_left_out", "exemplars_error_left_out"):
            rec[c] = tmpl[c] * s
        for st in STAGES:
            rec[f"{st}_counts"] = _scaled(tmpl[f"{st}_counts"], s)
            rec[f"{st}_sum_ms"] = tmpl[f"{st}_sum_ms"] * s
        if slow is not None and tmpl["api"] == "Produce":
            stages = (slow.stage, "total", *(() if slow.stage == "remote"
                                             else ("total_minus_remote",)))
            _slow_stages(rec, stages, slow.delay_ms)
        if held is not None and key == "Produce:acks=-1":
            _slow_stages(rec, ("remote", "total"), held)
        wid = f"{self.cluster}:{b}:{key}:0:{start}:0"
        rec["record_id"] = wid
        out["request_windows"].append(rec)
        clients = []
        for c in self.t.clients[key][i]:
            cid = c["client_id"]
            name = None if cid is None else f"{cid}-{b % self.client_names}"
            cr = {**c, "cluster": self.cluster, "broker": b, "ts_ms": start, "emission": 0,
                  "client_id": name, "requests": c["requests"] * s,
                  "slow_sends": c["slow_sends"] * s,
                  "send_counts": _scaled(c["send_counts"], s),
                  "record_id": f"{wid}:client={name}" if name is not None else f"{wid}:other"}
            if name in slow_clients:
                _slow_stages(cr, ("send",), slow_clients[name].delay_ms)
                cr["slow_sends"] = cr["requests"]
            clients.append(cr)
        out["client_send_windows"] += self._top_clients(clients, wid)
        slowest = [e for e in self.t.exemplars[key][i] if "slowest" in e["exemplar_reasons"]]
        slowest.sort(key=_judged, reverse=True)
        keep = {id(e) for e in slowest[:self.exemplar_slowest]} \
            if self.exemplar_slowest is not None else {id(e) for e in slowest}
        for n, e in enumerate(self.t.exemplars[key][i]):
            if id(e) not in keep and set(e["exemplar_reasons"]) <= {"slowest"}:
                continue
            er = {**e, "cluster": self.cluster, "broker": b, "window_id": wid,
                  "ts_ms": start + (e["ts_ms"] - tmpl["ts_ms"]),
                  "record_id": f"{self.cluster}:{b}:sim:{start}:{key}:{n}"}
            if slow is not None and e["api"] == "Produce":
                er["total_ms"] = e["total_ms"] + slow.delay_ms
                er[f"{slow.stage}_ms"] = e[f"{slow.stage}_ms"] + slow.delay_ms
            out["request_exemplars"].append(er)

    def _top_clients(self, rows: list[dict], wid: str) -> list[dict]:
        """The agent's client rows under `top_clients`: the busiest named clients and every
        one with a slow send keep their rows; the others are summed into the `other` row."""
        if self.top_clients is None:
            return rows
        named = sorted((r for r in rows if r["client_id"] is not None),
                       key=lambda r: (-r["requests"], r["client_id"]))
        kept = [r for n, r in enumerate(named) if n < self.top_clients or r["slow_sends"]]
        summed = [r for r in rows if r["client_id"] is None] + \
            [r for r in named if not any(r is k for k in kept)]
        if not summed:
            return kept
        hist: dict[int, int] = {}
        for r in summed:
            for bk, c in zip(r["send_buckets"], r["send_counts"]):
                hist[bk] = hist.get(bk, 0) + c
        other = {**summed[0], "client_id": None, "record_id": f"{wid}:other",
                 "clients": sum(r.get("clients") or 1 for r in summed),
                 "requests": sum(r["requests"] for r in summed),
                 "slow_sends": sum(r["slow_sends"] for r in summed),
                 "send_max_ms": max(r["send_max_ms"] for r in summed),
                 "send_buckets": sorted(hist), "send_counts": [hist[k] for k in sorted(hist)]}
        return kept + [other]

    def write(self, landing_root: str | Path, start_ms: int, agent_id: str = "fleet-sim") -> dict:
        """Write one window's records to the landing folder; returns records per stream."""
        sink = LandingSink(landing_root, agent_id)
        counts = {}
        window = self.window(start_ms)
        self.requests_written += sum(r["requests"] for r in window["request_windows"])
        for stream, recs in window.items():
            for r in recs:
                sink.send(stream, "", r)
            counts[stream] = len(recs)
        sink.flush()
        return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brokers", type=int, default=100)
    p.add_argument("--windows", type=int, default=6, help="10-s windows to write")
    p.add_argument("--start-ms", type=int, default=1_800_000_000_000)
    p.add_argument("--rate", type=float, default=10_000.0, help="requests/s per broker")
    p.add_argument("--recording", type=Path, default=DEFAULT_RECORDING)
    p.add_argument("--out", type=Path, required=True, help="landing folder")
    a = p.parse_args(argv)
    sim = FleetSim(templates_from_recording(a.recording), a.brokers, rate=a.rate)
    for w in range(a.windows):
        counts = sim.write(a.out, a.start_ms + w * WINDOW_MS)
        print(f"window {w}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
