"""Edge aggregation of one broker's request log into 10-s windows (issue 24, fleet scale).

One `request_stages` record per broker request is too many for 2,000 brokers. A
`WindowAggregator` takes the records `parse_request_line` gives for one broker, in file
order, and ships per window instead (a window record's ``ts_ms`` is its window's start:
the request's completion time ``t - t % window_ms``):

- ``request_windows``: per request key (the API; Fetch split into ``Fetch:consumer`` and
  ``Fetch:follower``, Produce by acks: ``Produce:acks=-1`` ...; controller-listener
  traffic apart, ``is_controller_traffic`` in the key): requests, errors (any non-zero
  error code), request and response bytes, and for the seven stages and
  ``total_minus_remote`` (total - remote floored at 0: a purgatory API's own time) the sum,
  the max and the histogram (core/latency_histogram.py) as two parallel arrays; the
  exemplar accounting (ingest/request_exemplars.py) and how many clients were folded.
- ``follower_fetch_windows``: per follower (fetch_replica_id): requests, the max fetch
  gap, the send_ms histogram (evaluation/inputs/request_windows.py
  `read_window_follower_windows`). Per connection (replica id, remote address) the gap is
  ``max(0, (ts_ms - total_ms) - the previous line's ts_ms)``; the previous completion is
  remembered across windows (and across a restart, in the checkpoint). The edge takes a
  connection's lines in file order, which is their (ts_ms, correlation_id) order: a
  connection belongs to one network thread, and Kafka answers its requests one at a
  time, in order.
- ``client_send_windows``: per client and request key, replica fetches and controller
  traffic left out (as the detector's read does): requests, sends at or over
  `send_threshold_ms`, the send_ms histogram and max; for the `top_clients` busiest
  clients of the key's window plus every client with a slow send, the rest summed in one
  record with client_id None (a request without a client id counts as ``(none)``). For
  Produce keys also the TotalTime histogram, and how many of the requests followed
  another on their connection (client id, remote address) in the window (``followed``)
  and how many of those the broker read within QUEUED_GAP_MS of answering the one before
  (``queued``: they had waited in the socket); what the slow-link rule reads
  (evaluation/inputs/request_windows.py `read_window_producer_times`). A late delta
  starts its connections afresh: its first request on each is not counted as following
  one.
- ``request_exemplars``: the selected requests whole (ingest/request_exemplars.py).

Emission. A window is emitted when the broker's newest ts_ms (the watermark) reaches its
end + `lateness_ms`, or by `flush_all` (shutdown). A line of a window already emitted is
late: it goes into a delta of that window, emitted at the next watermark step (the
watermark crossing a window boundary), or sooner once a later late line is past the
delta's end + `lateness_ms` (a broker clock stepped back, or honest lines behind one that
ran ahead, would otherwise wait as long as the step), with the window's emission number +
1 and the late lines' counts only; summing a window's emissions gives its totals. Lines
stamped far ahead of the host's clock never get here (ingest/tail_agent.py). Everything an
emission holds is decided by the sequence of lines (the watermark is a running max of
their ts_ms), never by the clock or how lines were batched: a replay of the same lines
gives the same records under the same ids.

Exactly once across a crash. The agent saves its state only after the sink flushed
what `ready` returned. `checkpoint()` holds the resume position (the earliest line still
in an un-emitted window or delta: the agent re-reads from there), the watermark, and per
window emitted within the last `retain_ms` of watermark its emission number and the
highest line position it counted. After a restart from it, a line that an emitted window
already counted is skipped, and the un-emitted windows are rebuilt from their lines and
emitted with the same ids and contents (silver keeps one record per id). The watermark
saved is the newest, not the one at the resume position: every step it took since that
line closed windows the checkpoint lists as emitted, whose re-read lines are skipped, so
replaying those steps would change nothing. Each follower connection's last completion
before the resume position is saved too, so re-read lines get the same gaps. Positions are
(inode, byte offset) pairs, as in the agent's record ids; files are ordered by when the
aggregator first saw them (log4j renames rotated files, so offsets only grow within an
inode; copy-and-truncate rotation is not supported, as by ingest/file_tailer.py). A window
forgotten after `retain_ms` that gets a line again (a clock stepped back) is emitted under
an emission number above every forgotten one, so no id is ever reused.

`flush_all` emits windows whose contents depend on when it was called, which a replay
cannot know: their boundary (the last line's position) goes into the checkpoint, and a
restart rebuilds them up to it and emits them again, identical. So the checkpoint taken
right after `flush_all` must be saved BEFORE its records are sent (and again after): a
crash between the send and the save then cannot reissue those ids with other contents.

Speed (bench/bench_edge_aggregation.py, CPU time of one core of a 2-vCPU VM): about
210,000 parsed lines/s aggregated (4.8 us a line on its recorded log), a third of it in
the stage counting (request_window_records.count_stages); reading and parsing a line cost
about 13 us more, so the agent as a whole handles about 54,000 lines/s.

The request-log agent (ingest/request_log_agent.py) runs one aggregator per broker file
and saves its checkpoint beside the file position; the streams' tables are declared in
schemas/ (docs/edge-aggregation.md).
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

from core.latency_histogram import bucket_of
from core.signals import judged_ms
from ingest.request_exemplars import ExemplarLimits
from ingest.request_window_records import (FILE_SHIFT, STAGES, STREAMS, Acc, Output, Part,
                                           count_stages, part_outputs)
from schemas.client_send_windows import QUEUED_GAP_MS
from schemas.request_stages import STAGE_COLUMNS

__all__ = ["STAGES", "STREAMS", "Output", "WindowAggregator", "request_key"]

NO_CLIENT = "(none)"
FETCH_CONSUMER, FETCH_FOLLOWER = "Fetch:consumer", "Fetch:follower"
PRODUCE_KEYS = {a: f"Produce:acks={a}" for a in (-1, 0, 1)}
CHECKPOINT_VERSION = 1
_INF = float("inf")


def request_key(api: str, fetch_kind: str | None, acks: int | None) -> str:
    """A request's key: its API, Fetch split into consumer and follower fetches, Produce
    by acks. Follower and acks keys are the shared constants (compared by identity)."""
    if api == "Fetch":
        return FETCH_FOLLOWER if fetch_kind == "follower" else FETCH_CONSUMER
    if api == "Produce":
        return PRODUCE_KEYS.get(acks) or f"Produce:acks={acks}"
    return api


class WindowAggregator:
    """Per-window request aggregates of one broker's request log (module docstring)."""

    def __init__(self, cluster: str, broker: int, *, window_ms: int = 10_000,
                 lateness_ms: int = 5_000, slow_ms: float = 300.0, slow_cap: int = 20,
                 slowest: int = 5, error_cap: int = 10, sample_every: int = 1000,
                 send_threshold_ms: float = 300.0, top_clients: int = 20,
                 retain_ms: int = 300_000, connection_idle_ms: int = 600_000,
                 state: dict | None = None):
        if window_ms <= 0 or lateness_ms < 0:
            raise ValueError("window_ms must be > 0 and lateness_ms >= 0")
        # A window or delta is held for at most two windows + the lateness of watermark:
        # what is forgotten later than that can no longer be needed by a replay.
        horizon = 2 * window_ms + lateness_ms
        if retain_ms <= horizon or connection_idle_ms <= horizon:
            raise ValueError(f"retain_ms and connection_idle_ms must exceed {horizon} ms")
        self.cluster, self.broker = cluster, broker
        self.window_ms, self.lateness_ms = window_ms, lateness_ms
        self.limits = ExemplarLimits(slow_ms, slow_cap, slowest, error_cap, sample_every)
        self.send_threshold_ms = send_threshold_ms
        self.top_clients = top_clients
        self._slow_ms, self._sample_cut = slow_ms, self.limits.sample_cut
        self.retain_ms, self.connection_idle_ms = retain_ms, connection_idle_ms
        self.skipped = 0            # re-read lines an emitted window had counted
        self._out: list[Output] = []
        self._open: dict[int, Part] = {}
        self._late: dict[int, Part] = {}
        self._late_due: float = _INF           # when late lines' own time closes a delta
        self._emitted: dict[int, list] = {}    # start -> [emission, last pos, wm at emission]
        self._forgotten_upto: int | None = None
        self._emission_floor = 0
        self._forced: list[list] = []          # flush_all emissions not yet released
        self._rebuild: list[list] = []         # restored flush_all emissions, to redo
        self._rebuild_at: float = _INF         # the first one's boundary
        self._hold: int | None = None          # the restored resume, until a line comes
        self._files: dict[int, int] = {}       # inode -> ordinal
        self._next_ordinal = 0
        self._cur_inode, self._cur_base = None, 0
        self._conns: dict[tuple, deque] = {}   # (replica, addr) -> deque of (pos, ts, wm)
        self._last_pos = -1
        self._wm: int | None = None
        self._set_closed(None)
        if state is not None:
            self._restore(state)

    # ---- the hot path ------------------------------------------------------------------
    def add(self, rec: dict, position: tuple[int, int]) -> None:
        """One parsed record and its line's (inode, byte offset), in file order. A record
        whose stage times are not finite, non-negative numbers raises ValueError before it
        changes anything: counted, it would make its window unsendable."""
        for f in STAGE_COLUMNS:     # every one counted in the window's sums and histograms
            v = rec[f]
            if not 0.0 <= v < _INF:     # NaN fails too
                raise ValueError(f"request-log record {f} = {v!r}: not a time in ms")
        inode, offset = position
        pos = (self._cur_base | offset) if inode == self._cur_inode else self._pos(inode, offset)
        if pos > self._rebuild_at:
            self._force_rebuild()
        ts = rec["ts_ms"]
        wm = self._wm
        if wm is None or ts > wm:
            self._wm = ts
            if ts >= self._next_close:
                self._close(ts)
        self._hold = None
        self._last_pos = pos

        api = rec["api"]
        controller = rec["is_controller_traffic"]
        key = request_key(api, rec["fetch_kind"], rec["acks"])
        gap = None
        replica = rec["fetch_replica_id"] if key is FETCH_FOLLOWER and not controller else None
        if replica is not None:   # every follower line moves its connection, counted or not
            conn = self._conns.get((replica, rec["remote_addr"]))
            if conn is None:
                conn = self._conns[(replica, rec["remote_addr"])] = deque()
            else:
                gap = (ts - rec["total_ms"]) - conn[-1][1]
                if gap < 0.0:
                    gap = 0.0
            conn.append((pos, ts, self._wm))

        start = ts - ts % self.window_ms
        part = self._open.get(start)
        late = False
        if part is None:
            part = self._part_for(start, pos)
            if part is None:
                self.skipped += 1
                if pos == self._rebuild_at:
                    self._force_rebuild()
                return
            late = self._late.get(start) is part
        part.last_pos = pos
        acc = part.accs.get(key if not controller else "controller|" + key)
        if acc is None:
            acc = part.accs[key if not controller else "controller|" + key] = Acc(
                key, api, controller, self.limits)

        t, rm, sd = rec["total_ms"], rec["remote_ms"], rec["send_ms"]
        codes = rec["error_codes"]
        acc.requests += 1
        if codes:
            acc.errors += 1
        acc.request_bytes += rec["request_bytes"] or 0
        acc.response_bytes += rec["response_bytes"] or 0
        sb = count_stages(acc.sums, acc.maxes, acc.hists, t, rec["request_queue_ms"],
                           rec["local_ms"], rm, rec["throttle_ms"], rec["response_queue_ms"], sd)

        if replica is not None:
            f = part.followers.get(replica)
            if f is None:
                f = part.followers[replica] = [0, None, 0.0, {}]
            f[0] += 1
            if gap is not None and (f[1] is None or gap > f[1]):
                f[1] = gap
            if sd > f[2]:
                f[2] = sd
            f[3][sb] = f[3].get(sb, 0) + 1
        elif not controller and key is not FETCH_FOLLOWER:
            cid = rec["client_id"]
            name = cid if cid is not None else NO_CLIENT
            c = acc.clients.get(name)
            if c is None:
                c = acc.clients[name] = [0, 0, 0.0, {}, {} if api == "Produce" else None, 0, 0]
            c[0] += 1
            if sd >= self.send_threshold_ms:
                c[1] += 1
            if sd > c[2]:
                c[2] = sd
            c[3][sb] = c[3].get(sb, 0) + 1
            # The client's connection (any API): when the broker answered the request before
            # on it in this window, for a Produce request's wait in the socket (below).
            addr = rec["remote_addr"]
            prev = None
            if addr is not None:
                conns = part.client_conns
                prev = conns.get((name, addr))
                conns[(name, addr)] = ts
            th = c[4]
            if th is not None:   # a Produce key's client
                b = bucket_of(t)
                th[b] = th.get(b, 0) + 1
                if prev is not None:
                    c[5] += 1
                    if (ts - t) - prev <= QUEUED_GAP_MS:
                        c[6] += 1

        picker = acc.picker
        sampled = ((offset + inode) * 2654435761) & 0xFFFFFFFF < self._sample_cut  # sample_hash
        judged = judged_ms(api, t, rm)   # as the slow-broker rule and slow_requests judge it
        if judged > picker.slowest_floor or judged >= self._slow_ms or codes or sampled:
            picker.offer(rec, pos, inode, offset, judged, bool(codes), sampled)
        if late and ts >= self._late_due:
            self._emit_late(ts)
        if pos == self._rebuild_at:
            self._force_rebuild()

    def _pos(self, inode: int, offset: int) -> int:
        ordinal = self._files.get(inode)
        if ordinal is None:
            ordinal = self._files[inode] = self._next_ordinal
            self._next_ordinal += 1
        self._cur_inode, self._cur_base = inode, ordinal << FILE_SHIFT
        return self._cur_base | offset

    def _part_for(self, start: int, pos: int) -> Part | None:
        """The part a line of a window that is not open goes to; None: already counted."""
        done = self._emitted.get(start)
        if done is None and start >= self._closed_before:
            part = self._open[start] = Part(start, 0, pos)
            return part
        if done is not None and pos <= done[1]:
            return None
        part = self._late.get(start)
        if part is None:
            if done is not None:
                emission = done[0] + 1
            elif self._forgotten_upto is not None and start <= self._forgotten_upto:
                emission = self._emission_floor
            else:
                emission = 0
            part = self._late[start] = Part(start, emission, pos)
            due = start + self.window_ms + self.lateness_ms
            if due < self._late_due:
                self._late_due = due
        return part

    # ---- emission ----------------------------------------------------------------------
    def _set_closed(self, wm: int | None) -> None:
        """Windows starting before `_closed_before` are closed; the next close comes when
        the watermark reaches `_next_close`."""
        if wm is None:
            self._closed_before, self._next_close = -(1 << 62), -_INF
            return
        k = (wm - self.lateness_ms) - (wm - self.lateness_ms) % self.window_ms
        self._closed_before = k
        self._next_close = k + self.window_ms + self.lateness_ms

    def _close(self, wm: int) -> None:
        """The watermark crossed a window boundary: emit the windows it closed and every
        late delta, release what no replay can need any more."""
        self._set_closed(wm)
        for start in sorted(s for s in self._open if s < self._closed_before):
            self._emit(self._open.pop(start), wm)
        for start in sorted(self._late):
            self._emit(self._late.pop(start), wm)
        self._late_due = _INF
        self._forced.clear()
        for start, (emission, _last, at) in list(self._emitted.items()):
            if wm - at > self.retain_ms:
                del self._emitted[start]
                self._forgotten_upto = max(start, self._forgotten_upto or start)
                self._emission_floor = max(self._emission_floor, emission + 1)
        resume = self._resume()
        for name, conn in list(self._conns.items()):
            if wm - conn[-1][2] > self.connection_idle_ms:
                del self._conns[name]
                continue
            while len(conn) > 1 and conn[1][0] < resume:
                conn.popleft()

    def _emit_late(self, ts: int) -> None:
        """The late lines' own time passed a delta's window end + lateness (a clock stepped
        back, or lines behind one that ran ahead): emit it now, not at the next watermark
        step, which is as far away as the clock stepped back. Decided by the lines alone,
        as every emission is."""
        cut = ts - self.lateness_ms
        for start in sorted(s for s in self._late if s + self.window_ms <= cut):
            self._emit(self._late.pop(start), self._wm)
        self._late_due = min((s + self.window_ms + self.lateness_ms for s in self._late),
                             default=_INF)

    def _emit(self, part: Part, wm: int | None) -> None:
        self._out += part_outputs(self, part)
        self._emitted[part.start] = [part.emission, part.last_pos, wm]

    def ready(self) -> list[Output]:
        """The records emitted since the last call; send them, flush, then checkpoint."""
        out, self._out = self._out, []
        return out

    def flush_all(self) -> list[Output]:
        """Emit every open window and late delta now (shutdown). Save `checkpoint()` before
        sending what this returns (module docstring)."""
        if self._out:
            raise RuntimeError("take ready()'s records (and save a checkpoint) first")
        self._force_all(self._last_pos)
        return self.ready()

    def _force_all(self, boundary: int) -> None:
        """Emit every open window and late delta, remembering the boundary (the last line
        added) until the next watermark step, so that a replay can do the same."""
        for part in sorted(self._open.values(), key=lambda p: p.start) + \
                sorted(self._late.values(), key=lambda p: p.start):
            base = self._emitted.get(part.start) or [None, None, None]
            self._forced.append([part.start, part.emission, boundary, part.first_pos,
                                 base[1], base[2]])
            self._emit(part, self._wm)
        self._open.clear()
        self._late.clear()
        self._late_due = _INF

    def _force_rebuild(self) -> None:
        """A restored flush_all boundary was reached: emit what that flush_all emitted."""
        boundary = self._rebuild[0][2]
        self._rebuild = [f for f in self._rebuild if f[2] != boundary]
        self._rebuild_at = self._rebuild[0][2] if self._rebuild else _INF
        self._force_all(boundary)

    def inode_of(self, ordinal: int) -> int:
        for inode, o in self._files.items():
            if o == ordinal:
                return inode
        raise KeyError(ordinal)

    # ---- checkpoint --------------------------------------------------------------------
    def _resume(self) -> float:
        """The position key of the earliest line held (inf: none)."""
        held = [p.first_pos for p in (*self._open.values(), *self._late.values())]
        held += [f[3] for f in (*self._forced, *self._rebuild)]
        if self._hold is not None:
            held.append(self._hold)
        return min(held, default=_INF)

    def resume_position(self) -> tuple[int, int] | None:
        """(inode, byte offset) of the earliest line still held, where a restart must
        re-read from; None when nothing is held (the checkpoint's "resume")."""
        resume = self._resume()
        if resume == _INF:
            return None
        return self.inode_of(int(resume) >> FILE_SHIFT), int(resume) & ((1 << FILE_SHIFT) - 1)

    def checkpoint(self) -> dict:
        """The state to save once everything `ready` returned is flushed (JSON-able)."""
        if self._out:
            raise RuntimeError("checkpoint() before the emitted records were taken")
        resume = self._resume()
        held = self.resume_position()
        keep_from = (int(resume) >> FILE_SHIFT) if resume != _INF else \
            (self._cur_base >> FILE_SHIFT)
        conns = []
        for (replica, addr), conn in self._conns.items():
            before = [e for e in conn if e[0] < resume]
            if before:
                conns.append([replica, addr, *before[-1]])
        return {
            "version": CHECKPOINT_VERSION,
            "resume": None if held is None else {"inode": held[0], "offset": held[1]},
            "resume_key": None if resume == _INF else int(resume),
            "watermark_ms": self._wm,
            "files": sorted([i, o] for i, o in self._files.items() if o >= keep_from),
            "next_ordinal": self._next_ordinal,
            "emitted": sorted([s, *e] for s, e in self._emitted.items()),
            "forced": [list(f) for f in (*self._rebuild, *self._forced)],
            "forgotten_upto": self._forgotten_upto,
            "emission_floor": self._emission_floor,
            "connections": conns,
        }

    def _restore(self, state: dict) -> None:
        if state.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"unknown checkpoint version {state.get('version')!r}")
        self._files = {int(i): int(o) for i, o in state["files"]}
        self._next_ordinal = int(state["next_ordinal"])
        self._wm = state["watermark_ms"]
        self._set_closed(self._wm)
        self._emitted = {s: [e, last, at] for s, e, last, at in state["emitted"]}
        self._forgotten_upto = state["forgotten_upto"]
        self._emission_floor = state["emission_floor"]
        # flush_all emissions are rebuilt from the re-read lines and emitted again at the
        # same boundary (kept in the checkpoint until then): each window is restored as it
        # was before its first forced emission.
        self._rebuild = sorted((list(f) for f in state["forced"]), key=lambda f: f[2])
        seen = set()
        for start, emission, _boundary, _first, base_last, base_at in self._rebuild:
            if start not in seen:
                seen.add(start)
                if base_last is None:
                    self._emitted.pop(start, None)
                else:
                    self._emitted[start] = [emission - 1, base_last, base_at]
        self._rebuild_at = self._rebuild[0][2] if self._rebuild else _INF
        if state["resume_key"] is not None:
            self._hold = state["resume_key"]
        self._conns = {(r, a): deque([(p, ts, wm)]) for r, a, p, ts, wm in state["connections"]}


def line_position(record_id: str) -> tuple[int, int]:
    """A request-log record's line position, (inode, byte offset), from its record id
    (``<cluster>:<broker>:<inode>:<offset>``, as the agent names it)."""
    try:
        inode, offset = record_id.rsplit(":", 2)[-2:]
        return int(inode), int(offset)
    except ValueError:
        raise ValueError(f"request-log record id {record_id!r} is not "
                         "<cluster>:<broker>:<inode>:<offset>") from None


def aggregate(records: Iterable[dict], cluster: str, broker: int,
              **options) -> list[Output]:
    """The windows an agent would have sent for one broker's parsed request records (each
    with its agent record id), every window emitted: what a recording kept as records
    becomes what the pipeline reads. `options`: WindowAggregator's keyword arguments."""
    agg = WindowAggregator(cluster, broker, **options)
    for rec in sorted(records, key=lambda r: line_position(r["record_id"])):
        agg.add(rec, line_position(rec["record_id"]))
    return agg.ready() + agg.flush_all()
