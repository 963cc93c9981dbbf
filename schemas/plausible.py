"""Bounds of what a Kafka telemetry value can be, shared by the tables' checks and the parsers.

A row outside them cannot be true: an event before 2000 or after 2100, a negative offset,
count or node id, one request longer than a day, a stage longer than the request it is part
of, an integer wider than the Kafka field it was read from. The tables in schemas/ declare
them as ``CHECKS`` (a row that breaks one goes to quarantine under the rule's name,
jobs/validation.py), and the edge parsers refuse the same values with the same names, so
whatever a parser returns passes its table's checks (tests/unit/test_parser_fuzz.py holds
them to it).

Kafka's own "none" and "unknown" values stay valid where Kafka writes them: leader -1 (no
leader), leader epoch -1 (unknown), negative error codes (-1 is UNKNOWN_SERVER_ERROR).
The event time has a static upper bound only; how far ahead of its arrival an event may be
is the silver job's rule, not a property of the row.

A table declares its bounds once, as `Bound`s: `checks` turns them into its ``CHECKS``
and a parser calls `first_broken` on the record it built. The SQL uses few forms
(comparison, IS NULL, AND/OR, size, array_min, array_max): the fuzz tests evaluate it in
Python, and Delta CHECK constraints take no lambda functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

MIN_TS_MS = 946_684_800_000    # 2000-01-01T00:00:00Z: no Kafka telemetry is older
MAX_TS_MS = 4_102_444_800_000  # 2100-01-01T00:00:00Z
DAY_MS = 86_400_000            # no single request, stage or window lasts longer

# RequestChannel computes every stage as a sub-interval of the request's nanosecond
# span, each divided to milliseconds on its own; the slack absorbs that rounding (and
# a logger's decimals) and nothing a real stage could be.
STAGE_SLACK_MS = 1.0

# The request_stages stages that are parts of the request's total time. Throttling is
# not: since KIP-219 the broker answers first and then mutes the connection for the
# throttle time.
PART_STAGES = ("request_queue_ms", "local_ms", "remote_ms", "response_queue_ms", "send_ms")

INT16 = (-(2 ** 15), 2 ** 15 - 1)
INT32 = (-(2 ** 31), 2 ** 31 - 1)
INT64 = (-(2 ** 63), 2 ** 63 - 1)


@dataclass(frozen=True)
class Bound:
    """Columns whose values lie in [low, high] (an end left None is open); a null passes
    (REQUIRED says which columns must hold a value). `elements`: the columns are arrays,
    every element bounded. Each column is its own rule, ``<rule>:<column>``, unless
    `whole` names the rule alone (one column, e.g. implausible_event_time)."""

    rule: str
    columns: tuple[str, ...]
    low: int | float | None = None
    high: int | float | None = None
    elements: bool = False
    whole: bool = False

    def name(self, column: str) -> str:
        return self.rule if self.whole else f"{self.rule}:{column}"

    def checks(self) -> dict[str, str]:
        """The rules as Spark SQL conditions (schemas/table.py ``CHECKS``)."""
        out = {}
        for c in self.columns:
            low, high = (f"array_min({c})", f"array_max({c})") if self.elements else (c, c)
            terms = [t for t in (None if self.low is None else f"{low} >= {self.low}",
                                 None if self.high is None else f"{high} <= {self.high}") if t]
            cond = " AND ".join(terms)
            out[self.name(c)] = (f"{c} IS NULL OR size({c}) = 0 OR ({cond})" if self.elements
                                 else f"{c} IS NULL OR " + (f"({cond})" if len(terms) > 1
                                                            else cond))
        return out

    def broken(self, rec: dict) -> str | None:
        """The first of the rules `rec` breaks (the parsers' side of `checks`), or None."""
        for c in self.columns:
            v = rec[c]
            if v is None:
                continue
            for x in (v if self.elements else (v,)):
                if x is not None and ((self.low is not None and x < self.low)
                                      or (self.high is not None and x > self.high)):
                    return self.name(c)
        return None


def checks(*bounds: Bound) -> dict[str, str]:
    """The rules of `bounds` as ``CHECKS`` entries."""
    return {name: sql for b in bounds for name, sql in b.checks().items()}


def first_broken(bounds: tuple[Bound, ...], rec: dict) -> str | None:
    """The name of the first rule of `bounds` that `rec` breaks, or None."""
    return next((name for b in bounds if (name := b.broken(rec)) is not None), None)


def checker(*bounds: Bound) -> Callable[[dict], str | None]:
    """`first_broken` of `bounds` as one flat loop, for a parser's hot path (the request
    log's runs per line)."""
    flat = tuple((c, -math.inf if b.low is None else b.low, math.inf if b.high is None
                  else b.high, b.name(c), b.elements) for b in bounds for c in b.columns)

    def broken(rec: dict) -> str | None:
        for column, low, high, name, elements in flat:
            v = rec[column]
            if v is None:
                continue
            if elements:
                if any(x is not None and not low <= x <= high for x in v):
                    return name
            elif not low <= v <= high:
                return name
        return None
    return broken


def event_time(column: str = "ts_ms") -> Bound:
    """A row's event time (epoch ms) within the static bounds."""
    return Bound("implausible_event_time", (column,), MIN_TS_MS, MAX_TS_MS, whole=True)


def width(kafka_type: tuple[int, int], *columns: str, low: int | None = None) -> Bound:
    """Columns read from a Kafka field of `kafka_type` (INT16, ...): out_of_range:<column>
    beyond it (or below `low`, for fields that cannot be negative)."""
    return Bound("out_of_range", columns, kafka_type[0] if low is None else low, kafka_type[1])


def in_range(value: int | float | None, low: int | float, high: int | float) -> bool:
    """Null, or within [low, high]."""
    return value is None or low <= value <= high
