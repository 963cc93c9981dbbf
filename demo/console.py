"""What the demo prints between its findings: numbered steps with elapsed time, and notes."""

from __future__ import annotations

import sys
import time


class Progress:
    """Numbered steps with elapsed time, so nobody wonders whether it hung."""

    def __init__(self, total: int, out=sys.stdout):
        self.total, self.n, self.t0, self.out = total, 0, time.monotonic(), out

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def step(self, text: str) -> None:
        self.n += 1
        print(f"[{self.n}/{self.total}] {text}  (+{self.elapsed():.0f}s)", file=self.out,
              flush=True)

    def note(self, text: str) -> None:
        print(f"      {text}", file=self.out, flush=True)
