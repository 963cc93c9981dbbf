"""Where decisions and action results are kept: the interfaces, and JSON-lines files.

Both stores upsert by key (a decision by decision_key, a result by action_id), so writing
the same row again changes nothing, and both return only once the rows are durable: the
executor commits its queue position only after its result is stored, and the decision
step records a decision only after its action is published.

- `JsonLinesResultStore`, `JsonLinesDecisionStore`: an append-only file per store, the last
  line of a key wins, fsynced on every write. For one machine, tests and a dry-run trial.
- remediation/delta_tables.py: the Delta implementations (gold.remediation_decisions,
  gold.remediation_results) with a MERGE on the same keys.

A torn last line (a crash in the middle of a write) is skipped with a warning; the row it
held was never acknowledged, so its writer did not move on.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence, TypeVar

from remediation.actions import ActionResult, Decision, canonical_json

log = logging.getLogger(__name__)

T = TypeVar("T")


class ResultStore(Protocol):
    def get(self, action_id: str) -> ActionResult | None: ...
    def put(self, result: ActionResult) -> None: ...
    def recent(self, since_ms: int, cluster: str | None = None) -> list[ActionResult]: ...


class DecisionStore(Protocol):
    def record(self, decisions: Sequence[Decision]) -> None: ...
    def load(self, *, finding_ids: Iterable[str], since_ms: int) -> list[Decision]: ...


class _JsonLines:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        text = "".join(canonical_json(r) + "\n" for r in rows)
        if not text:
            return
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())

    def latest(self, key: str, parse: Callable[[dict], T]) -> dict[str, T]:
        out: dict[str, T] = {}
        if not self.path.exists():
            return out
        with self._lock, open(self.path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    out[row[key]] = parse(row)
                except (ValueError, KeyError) as e:
                    log.warning("%s line %d unreadable (skipped): %s", self.path, n, e)
        return out


class JsonLinesResultStore:
    def __init__(self, path: str | Path):
        self._file = _JsonLines(path)

    def _all(self) -> dict[str, ActionResult]:
        return self._file.latest("action_id", ActionResult.from_row)

    def get(self, action_id: str) -> ActionResult | None:
        return self._all().get(action_id)

    def put(self, result: ActionResult) -> None:
        self._file.append([result.to_row()])

    def recent(self, since_ms: int, cluster: str | None = None) -> list[ActionResult]:
        return [r for r in self._all().values()
                if (r.finished_ms or r.started_ms) >= since_ms
                and (cluster is None or r.cluster == cluster)]


class JsonLinesDecisionStore:
    def __init__(self, path: str | Path):
        self._file = _JsonLines(path)

    def record(self, decisions: Sequence[Decision]) -> None:
        self._file.append(d.to_row() for d in decisions)

    def load(self, *, finding_ids: Iterable[str], since_ms: int) -> list[Decision]:
        ids = set(finding_ids)
        return [d for d in self._file.latest("decision_key", Decision.from_row).values()
                if d.finding_id in ids or d.decided_ms >= since_ms]
