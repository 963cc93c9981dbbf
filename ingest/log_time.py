"""Turn the ``%d`` stamp of Kafka's log4j layout into epoch milliseconds.

Kafka's layout ``[%d] %p %m (%c)%n`` writes ``%d`` in log4j's default ISO8601 form with a
comma before the milliseconds, in the broker's local time zone and without the zone:

    [2026-11-22 10:35:02,083] DEBUG Completed request:{...} (kafka.request.logger)

so the caller says which zone the broker logs in (UTC unless told). Converting is on the
hot path of the request-log parser, so the epoch of each minute is computed once and
cached; seconds and milliseconds are added by hand. Zone offsets only change on whole
minutes, so a per-minute cache is exact; in the repeated hour after a DST fall-back the
first occurrence is assumed (the stamp carries nothing that tells them apart).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone, tzinfo
from zoneinfo import ZoneInfo

UTC = timezone.utc

# "2026-11-22 10:35:02,083"; a dot instead of the comma is accepted too (custom layouts).
STAMP_RE = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d{3}")

_MINUTES: dict[tuple[str, tzinfo], int] = {}
_MAX_CACHED = 4096


def zone(tz: str | tzinfo | None) -> tzinfo:
    """A tzinfo from a name ("Europe/Paris", "UTC") or a tzinfo; None means UTC."""
    if tz is None:
        return UTC
    if isinstance(tz, str):
        return UTC if tz.upper() in ("UTC", "Z") else ZoneInfo(tz)
    return tz


def stamp_to_ms(stamp: str, tz: tzinfo = UTC) -> int:
    """Epoch ms of a ``yyyy-MM-dd HH:mm:ss,SSS`` stamp read in `tz`; ValueError if invalid."""
    minute = stamp[:16]
    key = (minute, tz)
    base = _MINUTES.get(key)
    if base is None:
        dt = datetime(int(minute[0:4]), int(minute[5:7]), int(minute[8:10]),
                      int(minute[11:13]), int(minute[14:16]), tzinfo=tz)
        base = int(dt.timestamp()) * 1000
        if len(_MINUTES) >= _MAX_CACHED:
            _MINUTES.clear()
        _MINUTES[key] = base
    seconds = int(stamp[17:19])
    if seconds > 59:
        raise ValueError(f"seconds out of range in {stamp!r}")
    return base + seconds * 1000 + int(stamp[20:23])
