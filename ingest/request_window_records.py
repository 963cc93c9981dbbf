"""One emission of a request-log window: what it counts per line, and the records it becomes.

Kept apart from the aggregator's state machine (ingest/request_windows.py, which decides
what goes into which emission and when): the accumulators (`Part`, one per window
emission; `Acc`, one per request key in it), the per-line counting of the eight stage
timings (`count_stages`, the hot path: about half of the aggregator's time) and the
output format, plain JSON-able dicts with snake_case columns, one function per stream.

Every record's event time ``ts_ms`` is its window's start (the window is [ts_ms, ts_ms +
window_ms)); an exemplar's is its request's, as in silver.request_stages. Record ids,
``record_id``, last in every record as the other agents set it (silver keeps one record
per id, so a replay's repeats are dropped):

- request_windows: ``<cluster>:<broker>:<key>:<controller 0|1>:<window_start_ms>:<emission>``
- follower_fetch_windows: ``<cluster>:<broker>:follower:<replica id>:<window_start_ms>:
  <emission>``
- client_send_windows: the request window's id + ``:client=<client id>``, or ``:other``
  for the clients folded together (client_id None)
- request_exemplars: the line's id as the agent gives it today,
  ``<cluster>:<broker>:<inode>:<byte offset>`` (a line is counted in one emission only).

A histogram is two parallel arrays, ``<stage>_buckets`` (ids ascending, see
core/latency_histogram.py) and ``<stage>_counts``. A request window record is a few KB of
compact JSON, its eight histograms holding some tens of buckets each: per broker and 10-s
window tens of KB of windows against about a MB of raw log lines (measured:
docs/edge-aggregation.md).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from core import signals
from core.latency_histogram import INV_LOG_GAMMA, MIN_BUCKET, MIN_MS, ZERO_BUCKET
from ingest.request_exemplars import ExemplarLimits, ExemplarPicker

STREAMS = ("request_windows", "follower_fetch_windows", "client_send_windows",
           "request_exemplars")
STAGES = ("total", *signals.STAGES, "total_minus_remote")
FILE_SHIFT = 40   # a line's position key: file ordinal << 40 | byte offset (files < 1 TiB)
_OFFSET_MASK = (1 << FILE_SHIFT) - 1


class Output(NamedTuple):
    stream: str
    record: dict


class Acc:
    """One request key of one window emission (the histograms are dicts bucket -> count)."""

    __slots__ = ("key", "api", "controller", "requests", "errors", "request_bytes",
                 "response_bytes", "sums", "maxes", "hists", "clients", "picker")

    def __init__(self, key: str, api: str, controller: bool, limits: ExemplarLimits):
        self.key, self.api, self.controller = key, api, controller
        self.requests = self.errors = self.request_bytes = self.response_bytes = 0
        self.sums = [0.0] * 8
        self.maxes = [0.0] * 8
        self.hists: list[dict[int, int]] = [{} for _ in range(8)]
        # client -> [requests, slow sends, max send, send hist, Produce: TotalTime hist
        # (None for other APIs), requests that followed one on their connection, queued]
        self.clients: dict[str, list] = {}
        self.picker = ExemplarPicker(limits)


class Part:
    """The lines of one window not emitted yet: its first emission or a late delta."""

    __slots__ = ("start", "emission", "first_pos", "last_pos", "accs", "followers",
                 "client_conns")

    def __init__(self, start: int, emission: int, pos: int):
        self.start, self.emission = start, emission
        self.first_pos = self.last_pos = pos
        self.accs: dict[str, Acc] = {}
        self.followers: dict[int, list] = {}   # replica -> [requests, max gap, max send, hist]
        # (client, remote address) -> ts_ms of the last line on that connection in this part
        self.client_conns: dict[tuple, float] = {}


def count_stages(sums: list, maxes: list, hists: list, t: float, rq: float, lc: float,
                 rm: float, th: float, rs: float, sd: float, log=math.log, ceil=math.ceil,
                 inv=INV_LOG_GAMMA, lo=MIN_MS, lob=MIN_BUCKET, zero=ZERO_BUCKET) -> int:
    """Count one request's eight stage values (sum, max, bucket); returns send_ms's bucket.

    The hot path, unrolled, with core.latency_histogram.bucket_of's expression inlined: a
    loop over the eight values took 4.0 us a request against 3.3 us unrolled (side by side
    on bench/bench_edge_aggregation.py's records, loaded machine), and a call per value
    costs ~60 ns more.
    """
    tr = t - rm if t > rm else 0.0   # core.signals.judged_ms of a purgatory API, inlined
    sums[0] += t
    sums[1] += rq
    sums[2] += lc
    sums[3] += rm
    sums[4] += th
    sums[5] += rs
    sums[6] += sd
    sums[7] += tr
    if t > maxes[0]:
        maxes[0] = t
    if rq > maxes[1]:
        maxes[1] = rq
    if lc > maxes[2]:
        maxes[2] = lc
    if rm > maxes[3]:
        maxes[3] = rm
    if th > maxes[4]:
        maxes[4] = th
    if rs > maxes[5]:
        maxes[5] = rs
    if sd > maxes[6]:
        maxes[6] = sd
    if tr > maxes[7]:
        maxes[7] = tr
    h0, h1, h2, h3, h4, h5, h6, h7 = hists
    b = ceil(log(t) * inv) if t > lo else (zero if t <= 0.0 else lob)
    h0[b] = h0.get(b, 0) + 1
    b = ceil(log(rq) * inv) if rq > lo else (zero if rq <= 0.0 else lob)
    h1[b] = h1.get(b, 0) + 1
    b = ceil(log(lc) * inv) if lc > lo else (zero if lc <= 0.0 else lob)
    h2[b] = h2.get(b, 0) + 1
    b = ceil(log(rm) * inv) if rm > lo else (zero if rm <= 0.0 else lob)
    h3[b] = h3.get(b, 0) + 1
    b = ceil(log(th) * inv) if th > lo else (zero if th <= 0.0 else lob)
    h4[b] = h4.get(b, 0) + 1
    b = ceil(log(rs) * inv) if rs > lo else (zero if rs <= 0.0 else lob)
    h5[b] = h5.get(b, 0) + 1
    b = ceil(log(tr) * inv) if tr > lo else (zero if tr <= 0.0 else lob)
    h7[b] = h7.get(b, 0) + 1
    b = ceil(log(sd) * inv) if sd > lo else (zero if sd <= 0.0 else lob)
    h6[b] = h6.get(b, 0) + 1
    return b


def _arrays(hist: dict[int, int]) -> tuple[list[int], list[int]]:
    ids = sorted(hist)
    return ids, [hist[b] for b in ids]


def part_outputs(agg, part) -> list[Output]:
    """Every record of one window emission (a `Part` of aggregator `agg`)."""
    head = f"{agg.cluster}:{agg.broker}"
    common = {"cluster": agg.cluster, "broker": agg.broker, "ts_ms": part.start,
              "window_ms": agg.window_ms, "emission": part.emission}
    out: list[Output] = []
    for acc in sorted(part.accs.values(), key=lambda a: (a.controller, a.key)):
        wid = f"{head}:{acc.key}:{int(acc.controller)}:{part.start}:{part.emission}"
        rec = {**common, "key": acc.key, "api": acc.api,
               "is_controller_traffic": acc.controller, "requests": acc.requests,
               "errors": acc.errors, "request_bytes": acc.request_bytes,
               "response_bytes": acc.response_bytes}
        for i, stage in enumerate(STAGES):
            rec[f"{stage}_sum_ms"] = acc.sums[i]
            rec[f"{stage}_max_ms"] = acc.maxes[i]
            rec[f"{stage}_buckets"], rec[f"{stage}_counts"] = _arrays(acc.hists[i])
        exemplars, accounting = acc.picker.pick()
        rec.update(accounting)
        clients, folded = client_records(agg, acc, wid, common)
        rec["clients"] = len(acc.clients)
        rec["clients_folded"] = folded
        rec["record_id"] = wid
        out.append(Output("request_windows", rec))
        out += clients
        out += exemplar_records(agg, exemplars, wid)
    for replica in sorted(part.followers):
        requests, max_gap, send_max, hist = part.followers[replica]
        ids, counts = _arrays(hist)
        out.append(Output("follower_fetch_windows", {
            **common, "follower": replica, "requests": requests, "max_fetch_gap_ms": max_gap,
            "send_max_ms": send_max, "send_buckets": ids, "send_counts": counts,
            "record_id": f"{head}:follower:{replica}:{part.start}:{part.emission}"}))
    return out


def client_records(agg, acc, wid: str, common: dict) -> tuple[list[Output], int]:
    """The key's clients: the `top_clients` busiest and every one with a slow send, and
    the others summed in one record (client_id None); and how many were folded."""
    clients = acc.clients
    if not clients:
        return [], 0
    if len(clients) > agg.top_clients:
        ranked = sorted(clients, key=lambda c: (-clients[c][0], c))
        keep = set(ranked[:agg.top_clients]) | {c for c, v in clients.items() if v[1]}
    else:
        keep = set(clients)
    out = []
    other = [0, 0, 0.0, {}, {} if acc.api == "Produce" else None, 0, 0]
    for cid in sorted(clients):
        requests, slow, send_max, hist, total, followed, queued = clients[cid]
        if cid in keep:
            out.append(Output("client_send_windows", {
                **common, "key": acc.key, "api": acc.api, "client_id": cid, "clients": 1,
                **_client_columns(requests, slow, send_max, hist, total, followed, queued),
                "record_id": f"{wid}:client={cid}"}))
            continue
        other[0] += requests
        other[1] += slow
        other[2] = max(other[2], send_max)
        _add_counts(other[3], hist)
        if total is not None:
            _add_counts(other[4], total)
        other[5] += followed
        other[6] += queued
    folded = len(clients) - len(keep)
    if folded:
        out.append(Output("client_send_windows", {
            **common, "key": acc.key, "api": acc.api, "client_id": None, "clients": folded,
            **_client_columns(*other), "record_id": f"{wid}:other"}))
    return out, folded


def _add_counts(into: dict[int, int], hist: dict[int, int]) -> None:
    for b, c in hist.items():
        into[b] = into.get(b, 0) + c


def _client_columns(requests: int, slow: int, send_max: float, hist: dict,
                    total: dict | None, followed: int, queued: int) -> dict:
    """A client row's counts; the Produce columns null for other APIs."""
    ids, counts = _arrays(hist)
    produce = total is not None
    t_ids, t_counts = _arrays(total) if produce else (None, None)
    return {"requests": requests, "slow_sends": slow, "send_max_ms": send_max,
            "send_buckets": ids, "send_counts": counts,
            "total_buckets": t_ids, "total_counts": t_counts,
            "followed": followed if produce else None, "queued": queued if produce else None}


def exemplar_records(agg, exemplars, wid: str) -> list[Output]:
    """The exemplars whole: the input record, its line id, its window and reasons."""
    inode_of = agg.inode_of
    out = []
    for pos, rec, reasons in exemplars:
        inode, offset = inode_of(pos >> FILE_SHIFT), pos & _OFFSET_MASK
        out.append(Output("request_exemplars", {
            **rec, "window_id": wid, "exemplar_reasons": reasons,
            "record_id": f"{agg.cluster}:{agg.broker}:{inode}:{offset}"}))
    return out
