"""Follow a log file the way `tail -F` does, across log4j size rotation, from a saved position.

log4j2's RollingFile with DefaultRolloverStrategy renames ``x.log`` to ``x.log.1`` (and
``.1`` to ``.2`` ...) and opens a fresh ``x.log``. A position is (inode, byte offset), so
after a rotation, or a restart of the agent that happened across one, the tailer finds the
file it was reading under its new name, reads it to the end, then moves on to the newer
files in order. Only complete lines (ending in a newline) are returned; a partial last
line waits for its end. Each line comes with the position just after it, which is what
the agent saves once the line is safely delivered, so a restart neither loses nor repeats.
"""

from __future__ import annotations

import json
import os
from collections import deque
from pathlib import Path
from typing import NamedTuple

MAX_ROTATED = 20


class Position(NamedTuple):
    """A place in a file: its inode and a byte offset. (Named tuples, not frozen
    dataclasses: the tailer makes two objects per line, and a frozen dataclass's
    constructor costs several times a tuple's, a tenth of the request-log agent's time.)"""
    inode: int
    offset: int

    def to_json(self) -> dict:
        return {"inode": self.inode, "offset": self.offset}


class TailedLine(NamedTuple):
    data: bytes            # without the trailing newline
    inode: int
    start: int             # byte offset of the line in its file
    after: Position        # where to resume once this line is delivered


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


class FileTailer:
    """Reads complete new lines of one log file, following rotation."""

    def __init__(self, path: str | Path, position: Position | None = None,
                 start_at_end: bool = False, chunk_bytes: int = 1 << 20):
        self.path = Path(path)
        self.chunk_bytes = chunk_bytes
        self._fh = None
        self._inode: int | None = None
        self._offset = 0
        self._pending = b""
        self._ready: deque[TailedLine] = deque()  # read but not yet handed out
        if position is not None:
            self._open_saved(position)
        elif start_at_end and self.path.exists():
            self._open(self.path, seek_end=True)

    @property
    def position(self) -> Position | None:
        if self._ready:
            first = self._ready[0]
            return Position(first.inode, first.start)
        if self._inode is None:
            return None
        return Position(self._inode, self._offset - len(self._pending))

    def _candidates(self) -> list[Path]:
        """Rotated files oldest first, then the live file."""
        rotated = [Path(f"{self.path}.{i}") for i in range(MAX_ROTATED, 0, -1)]
        return [p for p in rotated if p.exists()] + [self.path]

    def _open(self, path: Path, offset: int = 0, seek_end: bool = False) -> bool:
        try:
            fh = open(path, "rb")
        except FileNotFoundError:
            return False
        if self._fh:
            self._fh.close()
        self._fh = fh
        self._inode = os.fstat(fh.fileno()).st_ino
        size = os.fstat(fh.fileno()).st_size
        # A file shorter than the saved offset was truncated in place: start it over.
        self._offset = size if seek_end else (offset if offset <= size else 0)
        fh.seek(self._offset)
        self._pending = b""
        return True

    def _open_saved(self, pos: Position) -> None:
        for p in self._candidates():
            if _inode(p) == pos.inode:
                self._open(p, pos.offset)
                return
        # The saved file rotated out of reach: start with the oldest file still there.
        for p in self._candidates():
            if self._open(p):
                return

    def _next_file(self) -> bool:
        """After EOF: move to the file that came after the current one, if any."""
        files = self._candidates()
        inodes = [_inode(p) for p in files]
        if self._inode in inodes:
            i = inodes.index(self._inode)
            if i + 1 < len(files):
                return self._open(files[i + 1])
            return False
        # Our file was deleted: go to the oldest file we have not read (the next newer
        # one is unknowable, so take the live file to avoid rereading old ones).
        return self._open(self.path) if _inode(self.path) is not None else False

    def read_lines(self, max_lines: int = 10_000) -> list[TailedLine]:
        """Complete lines appended since the last call (at most max_lines)."""
        if self._fh is None and not self._open(self.path):
            return []
        ready = self._ready
        while len(ready) < max_lines:
            chunk = self._fh.read(self.chunk_bytes)
            if not chunk:
                if self._inode != _inode(self.path):
                    # Our file was rotated away and is complete. A last line without its
                    # newline will never get one: hand it over as it is (the parser
                    # quarantines it if it is cut) rather than lose it.
                    if self._pending:
                        start = self._offset - len(self._pending)
                        ready.append(TailedLine(self._pending, self._inode, start,
                                                Position(self._inode, self._offset)))
                        self._pending = b""
                    if self._next_file():
                        continue
                break
            data = self._pending + chunk
            start = self._offset - len(self._pending)
            self._offset += len(chunk)
            lines = data.split(b"\n")
            self._pending = lines.pop()
            for line in lines:
                start_of_next = start + len(line) + 1
                ready.append(TailedLine(line, self._inode, start,
                                        Position(self._inode, start_of_next)))
                start = start_of_next
        return [ready.popleft() for _ in range(min(max_lines, len(ready)))]

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None


class PositionStore:
    """Saved positions of one agent, one JSON file, replaced atomically. A source may save
    a state beside its position (an aggregator's checkpoint), saved and replaced with it:
    ``{name: {"inode", "offset"[, "state"]}}``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def _raw(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}

    def load(self) -> dict[str, Position]:
        return {k: Position(v["inode"], v["offset"]) for k, v in self._raw().items()}

    def load_states(self) -> dict[str, dict]:
        """The states saved beside the positions (sources that saved none are absent)."""
        return {k: v["state"] for k, v in self._raw().items() if v.get("state") is not None}

    def save(self, positions: dict[str, Position],
             states: dict[str, dict] | None = None) -> None:
        states = states or {}
        unplaced = set(states) - set(positions)
        if unplaced:
            raise ValueError(f"states without a position: {sorted(unplaced)}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        out = {}
        for k, pos in positions.items():
            out[k] = pos.to_json()
            if states.get(k) is not None:
                out[k]["state"] = states[k]
        tmp.write_text(json.dumps(out))
        os.replace(tmp, self.path)
