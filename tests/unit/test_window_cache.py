"""The live detector's incremental window reads (evaluation/inputs/window_cache.py):
only the windows started within reread_s of the range end are read again; the older
ones come from the last read, and anything that is not a continuation is read whole."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from evaluation.inputs.tables import TimeRange
from evaluation.inputs.window_cache import WindowReadCache

W = 10_000
T0 = 1_800_000_000_000          # a window boundary


@dataclass(frozen=True)
class Row:
    window_start_ms: int
    value: int


class Table:
    """Closed windows of a range, as the Spark reads give them; `value` can change
    (a late delta) and every read is recorded."""

    def __init__(self):
        self.values: dict[int, int] = {}
        self.reads: list[TimeRange] = []

    def read(self, r: TimeRange) -> list[Row]:
        self.reads.append(r)
        return [Row(s, v) for s, v in sorted(self.values.items())
                if s >= r.start_ms and s + W <= r.end_ms]


def _range(now: int) -> TimeRange:
    return TimeRange(now - 300_000, now)


def test_a_continuation_reads_only_the_windows_of_the_last_reread_s():
    t, cache = Table(), WindowReadCache(reread_s=60)
    t.values = {T0 + i * W: i for i in range(-40, 40)}
    now = T0 + 3_000
    assert cache.read("x", _range(now), W, t.read) == t.read(_range(now))
    t.reads.clear()
    for step in range(1, 20):
        now += W
        got = cache.read("x", _range(now), W, t.read)
        assert got == t.read(_range(now))          # the same rows as a whole read
        cached_read, _whole = t.reads[-2:]
        assert cached_read == TimeRange((now - 60_000) // W * W, now)
        assert cache.windows_read["x"] == now - (now - 60_000) // W * W


def test_a_late_delta_within_reread_s_is_seen_and_an_older_one_is_not():
    t, cache = Table(), WindowReadCache(reread_s=60)
    t.values = {T0 + i * W: 1 for i in range(-40, 40)}
    now = T0 + 3_000
    cache.read("x", _range(now), W, t.read)
    t.values[T0 - 2 * W] = 2                       # within the last 60 s: read again
    t.values[T0 - 20 * W] = 2                      # 200 s old: the cached value stays
    got = {r.window_start_ms: r.value for r in cache.read("x", _range(now + W), W, t.read)}
    assert got[T0 - 2 * W] == 2 and got[T0 - 20 * W] == 1


@pytest.mark.parametrize("later", [
    pytest.param(-W, id="the clock went back"),
    pytest.param(120_000, id="a gap longer than reread_s"),
])
def test_a_range_that_does_not_continue_the_last_one_is_read_whole(later):
    t, cache = Table(), WindowReadCache(reread_s=60)
    t.values = {T0 + i * W: i for i in range(-60, 60)}
    now = T0 + 3_000
    cache.read("x", _range(now), W, t.read)
    got = cache.read("x", _range(now + later), W, t.read)
    assert t.reads[-1] == _range(now + later) and got == t.read(_range(now + later))


def test_reads_are_kept_apart_by_name_and_window_length():
    t, cache = Table(), WindowReadCache(reread_s=60)
    t.values = {T0 + i * W: i for i in range(-40, 40)}
    now = T0 + 3_000
    cache.read("a", _range(now), W, t.read)
    cache.read("b", _range(now + W), W, t.read)
    assert t.reads[-1] == _range(now + W)          # "b" had no earlier read
    cache.read("a", _range(now + W), 5_000, t.read)
    assert t.reads[-1] == _range(now + W)          # another window length: whole


def test_reread_s_must_be_positive():
    with pytest.raises(ValueError, match="reread_s"):
        WindowReadCache(reread_s=0)


@dataclass(frozen=True)
class Sample:
    observed_ms: int
    value: int


def test_rows_by_their_own_time_with_the_reads_own_margin():
    """Rows (a scrape each, at any time, not windows) keyed by `time_of`: a continuation
    reads again only from `reread_ms` before the end (aligned down to `window_ms`) and
    gives the rows a whole read gives; a row that came later than the margin is not
    seen, as for windows."""
    rows = {T0 + i * 7_000 + 1_234: i for i in range(-100, 100)}
    reads: list[TimeRange] = []

    def read(r: TimeRange) -> list[Sample]:
        reads.append(r)
        return [Sample(t, v) for t, v in sorted(rows.items()) if r.start_ms <= t < r.end_ms]

    cache = WindowReadCache(reread_s=60)
    now = T0 + 5_000
    for step in range(15):
        got = cache.read("gauges", _range(now), W, read, time_of=lambda s: s.observed_ms,
                         reread_ms=120_000)
        assert got == read(_range(now))
        if step:
            assert reads[-2] == TimeRange((now - 120_000) // W * W, now)
        now += 20_000
    late = now - 150_000 + 3        # older than the margin when it lands
    rows[late] = -1
    got = cache.read("gauges", _range(now), W, read, time_of=lambda s: s.observed_ms,
                     reread_ms=120_000)
    assert Sample(late, -1) not in got and Sample(late, -1) in read(_range(now))


@dataclass(frozen=True, order=True)
class ClusterRow:
    cluster: str
    window_start_ms: int
    value: int


def test_a_cluster_behind_is_read_again_from_its_newest_window():
    """The pipeline fell behind for cluster "b": its windows closed late, after newer
    windows of "a" were read. They are read once they are there, also when they are older
    than reread_s by then; cluster "a" alone would read only the last 60 s."""
    closed = {"a": T0 + 30 * W, "b": T0 + 10 * W}       # windows before these are there
    reads: list[TimeRange] = []

    def read(r: TimeRange) -> list[ClusterRow]:
        reads.append(r)
        return [ClusterRow(c, s, 1) for c, until in sorted(closed.items())
                for s in range(T0, until, W) if s >= r.start_ms and s + W <= r.end_ms]

    cache = WindowReadCache(reread_s=60)
    now = T0 + 30 * W + 3_000
    cache.read("x", _range(now), W, read)
    closed["b"] = T0 + 31 * W                        # b caught up, a went on by one
    closed["a"] = T0 + 31 * W
    got = cache.read("x", _range(now + W), W, read)
    assert reads[-1] == TimeRange(T0 + 9 * W, now + W)   # from b's newest window read
    assert sorted(got) == sorted(read(_range(now + W)))
    got = cache.read("x", _range(now + 2 * W), W, read)
    assert reads[-1] == TimeRange((now + 2 * W - 60_000) // W * W, now + 2 * W)


class Written:
    """What silver says it wrote (SilverCommits.written_since's contract): each `write`
    is a stats row; a mark is the number of rows so far."""

    def __init__(self):
        self.rows: list[tuple[str, int]] = []

    def write(self, stream: str, low_ms: int) -> None:
        self.rows.append((stream, low_ms))

    def __call__(self, mark):
        if mark is None:
            return len(self.rows), None
        lows: dict[str, int] = {}
        for stream, low in self.rows[mark:]:
            lows[stream] = min(low, lows.get(stream, low))
        return len(self.rows), lows


def test_with_what_silver_wrote_only_those_windows_and_the_newest_are_read_again():
    t, written = Table(), Written()
    cache = WindowReadCache(reread_s=60, written=written)
    t.values = {T0 + i * W: 1 for i in range(-40, 0)}
    now = T0 + 3_000
    cache.read("x", _range(now), W, t.read, stream="s")
    # silver writes the next window, a late delta 200 s old and another stream's rows
    t.values[T0] = 1
    written.write("s", T0)
    t.values[T0 - 20 * W] = 2
    written.write("s", T0 - 20 * W + 500)
    written.write("other", T0 - 30 * W)
    now += W
    got = {r.window_start_ms: r.value for r in cache.read("x", _range(now), W, t.read,
                                                          stream="s")}
    assert got == {r.window_start_ms: r.value for r in t.read(_range(now))}
    assert got[T0 - 20 * W] == 2                   # older than reread_s, still seen
    assert t.reads[-2] == TimeRange(T0 - 20 * W, now)
    # nothing written since: only the windows the last range did not hold whole
    t.reads.clear()
    now += W
    cache.read("x", _range(now), W, t.read, stream="s")
    assert t.reads == [TimeRange((now - W) // W * W, now)]
    # a broker's windows that come 90 s late (its agent behind): read when they come
    t.values[T0 - 6 * W] = 3
    written.write("s", T0 - 6 * W)
    now += W
    got = {r.window_start_ms: r.value for r in cache.read("x", _range(now), W, t.read,
                                                          stream="s")}
    assert got[T0 - 6 * W] == 3


def test_without_a_stream_or_what_silver_wrote_the_margin_applies():
    t, written = Table(), Written()
    cache = WindowReadCache(reread_s=60, written=written)
    t.values = {T0 + i * W: 1 for i in range(-40, 40)}
    now = T0 + 3_000
    cache.read("x", _range(now), W, t.read)
    t.reads.clear()
    now += W
    cache.read("x", _range(now), W, t.read)
    assert t.reads == [TimeRange((now - 60_000) // W * W, now)]
