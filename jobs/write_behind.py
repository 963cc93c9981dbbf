"""One piece of work at a time in the background, in order: the detector query's
write-behind.

An evaluation of the detector query ends with slow work nobody downstream waits for once
the findings are handed to the exporter: the remediation decision step (Delta reads and
an append) and the MERGE into gold.anomalies. `WriteBehind` runs that work in a thread
while the next evaluation reads its inputs, so the next finding is not held up by the
last one's writes.

- At most one job is in flight: `submit` waits for the previous job first (a write never
  overtakes an earlier one, and a slow table cannot pile up work).
- A job that failed is raised by the next `submit`, in the caller's thread (the detector
  query then stops with that error, as it did when it wrote in its own thread), or by
  `drain`.
- Jobs run in a `pyspark.util.InheritableThread`: Spark's local properties of the
  submitting thread (its scheduler pool, the streaming query's job group) carry over.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)


class BackgroundJobFailed(RuntimeError):
    """A job run by `WriteBehind` failed; the message names it, the cause is chained."""


class WriteBehind:
    def __init__(self, name: str) -> None:
        self.name = name
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._what = ""
        self.waited_s = 0.0     # how long the last submit waited for the job before it
        self._lock = threading.Lock()   # submit runs in the query's thread, drain in stop()'s

    def submit(self, what: str, job: Callable[[], None]) -> None:
        """Run `job` in the background once the previous job has ended; raise the previous
        job's error instead if it failed (then `job` is not run)."""
        from pyspark.util import InheritableThread

        started = time.monotonic()
        self.drain()
        self.waited_s = time.monotonic() - started

        def run() -> None:
            try:
                job()
            except BaseException as e:  # noqa: BLE001 - kept, raised in the caller's thread
                self._error = e

        thread = InheritableThread(target=run, daemon=True, name=f"{self.name}: {what}")
        thread.start()
        # Published only once started: `stop()` drains from another thread, and a drain
        # that saw the thread before its start() failed ("cannot join thread before it is
        # started").
        with self._lock:
            self._what, self._thread = what, thread

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def drain(self, timeout_s: float | None = None) -> None:
        """Wait for the job in flight; raise `BackgroundJobFailed` if it failed (once: the
        error is cleared). With `timeout_s`, a job still running after it is left running
        and TimeoutError is raised."""
        with self._lock:
            thread, what = self._thread, self._what
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                raise TimeoutError(f"{self.name}: {what} still running after "
                                   f"{timeout_s:.0f} s")
            with self._lock:
                if self._thread is thread:
                    self._thread = None
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise BackgroundJobFailed(f"{self.name}: {what} failed: {error}") from error
