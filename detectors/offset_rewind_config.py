"""The [offset_rewind] config section: the keys offset_rewind.py and offset_reset.py read
(described in offset_rewind.py's docstring)."""

from __future__ import annotations

from dataclasses import dataclass

from core.config_keys import _key


@dataclass(frozen=True)
class OffsetRewindSection:
    evidence_window_s: float = _key("A client reset line or a truncation this close to a "
                                    "rewind (either side), or a coordinator load of the "
                                    "group's partition this long before it (with a loss of "
                                    "that partition this close to the load), explains it",
                                    120.0, min=1, max=86400)
    membership_max_age_s: float = _key("A group membership sample older than this at a commit "
                                       "counts as unknown", 300.0, min=1, max=86400)
    min_rewind_messages: int = _key("Ignore rewinds smaller than this many offsets", 1,
                                    min=1, max=10**12)
    reset_pair_window_s: float = _key("Longest gap between a Java client's reset-cause line and "
                                      "its new-position line", 5.0, min=0, max=600)
    reorder_wait_s: float = _key("A rewind that may still prove a reordered commit (its "
                                 "offset lies between the member's last two positions, or "
                                 "retries a commit of the member that failed) is reported "
                                 "only once the partition's commits of the next 10 s are "
                                 "in, and any rewind of a group with request-log lines only "
                                 "once they reach it (they say who committed it), or after "
                                 "this long: judged before them, it was a warning "
                                 "(member_commit) that the next evaluation took back to "
                                 "info (commit_reordered). 0: at once", 30.0, min=0,
                                 max=600)
