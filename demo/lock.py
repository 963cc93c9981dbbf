"""One demo per work folder."""

from __future__ import annotations

import os
from pathlib import Path

from demo.preflight import DemoError


class DemoLock:
    """One demo per work folder. A second `kmon demo` would stop the first one's cluster
    and remove its lake (`clean_previous`), so it stops at start instead, naming the
    process that holds the lock. An flock: it goes away with its process, even a killed
    one, so a crashed demo never leaves a stale lock."""

    def __init__(self, path: Path):
        self.path = path
        self._file = None

    def __enter__(self) -> "DemoLock":
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            raise DemoError(f"another kmon demo is running with this work folder (pid "
                            f"{holder}, lock {self.path}): wait for it to end, or stop it "
                            f"(Ctrl-C in its terminal, or kill {holder})") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._file = f
        return self

    def __exit__(self, *_exc) -> None:
        import fcntl

        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
