"""Follow a log file the way `tail -F` does, across log4j size rotation, from a saved position.

log4j2's RollingFile with DefaultRolloverStrategy renames ``x.log`` to ``x.log.1`` (and
``.1`` to ``.2`` ...) and opens a fresh ``x.log``. A position is (inode, byte offset), so
after a rotation, or a restart of the agent that happened across one, the tailer finds the
file it was reading under its new name, reads it to the end, then moves on to the newer
files in order. Only complete lines (ending in a newline) are returned; a partial last
line waits for its end. Each line comes with the position just after it, which is what
the agent saves once the line is safely delivered, so a restart neither loses nor repeats.

When the tailer cannot read on from where it was, it says so with a `Gap` (to its
``on_gap``, at the end of the `read_lines` call that skipped it) and goes on:

- ``rotated_away``: the saved file is gone at start (it rolled past the last kept index
  while the agent was down), or the file being read was deleted and the file that came
  after it is gone too; reading resumes with the oldest file not read yet. When the file
  being read was the newest the tailer knew of, it cannot tell whether files came between
  and reports the span all the same.
- ``truncated``: the file is shorter than the position (truncated in place, at start or
  while being read); it is read again from its start.

A position names a file by its inode, and ext4 gives a freed inode to the next file
created: a saved file deleted while the agent was down can come back as a newer file with
the same inode. So a saved position also keeps the file's head mark (the length and CRC-32
of its first `HEAD_BYTES` bytes, `head_mark`); a file with the saved inode but another head
is not the saved file, which is then ``rotated_away`` like any file gone. (A file shorter
than the saved offset is ``truncated`` whatever its head: it lost what was read either way.)
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from collections import deque
from pathlib import Path
from typing import Callable, NamedTuple

log = logging.getLogger(__name__)

MAX_ROTATED = 20
HEAD_BYTES = 64         # a file's head mark covers this much of its start (at most)


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


class Gap(NamedTuple):
    """Input the tailer skipped because it could not read it back."""
    cause: str                 # rotated_away or truncated (module docstring)
    lost_from: Position        # the first byte not read
    lost_path: str | None      # that file's name when last seen (None: unknown)
    resumed_at: Position
    resumed_path: str

    def to_json(self) -> tuple[dict, dict]:
        """(from, to) for the quarantine row."""
        return ({**self.lost_from.to_json(), "path": self.lost_path},
                {**self.resumed_at.to_json(), "path": self.resumed_path})


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def head_mark(data: bytes) -> str:
    """A file's identity beside its inode, from its first bytes: ``<length>:<crc32>``."""
    return f"{len(data)}:{zlib.crc32(data):08x}"


def _is_same_file(path: Path, pos: Position, mark: str | None) -> bool:
    """Whether `path`, which has the saved inode, is the file `pos` was saved in: its head
    mark matches, or nothing can tell otherwise (no mark or an unreadable one, nothing read
    yet), or it is shorter than the saved offset (truncated: reported as such)."""
    length = mark.split(":", 1)[0] if mark else ""
    if not length.isdigit() or pos.offset == 0:
        return True
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size < pos.offset:
                return True
            return head_mark(f.read(int(length))) == mark
    except FileNotFoundError:
        return False


class FileTailer:
    """Reads complete new lines of one log file, following rotation."""

    def __init__(self, path: str | Path, position: Position | None = None,
                 start_at_end: bool = False, chunk_bytes: int = 1 << 20,
                 on_gap: Callable[[Gap], None] | None = None, head: str | None = None):
        self.path = Path(path)
        self.chunk_bytes = chunk_bytes
        self.on_gap = on_gap
        self._fh = None
        self._inode: int | None = None
        self._opened_as: Path | None = None      # the current file's name when last seen
        # Inodes of the files before and after the current one, from the last listing: what
        # to skip, and which file must come next, when the current file disappears.
        self._older: set[int] = set()
        self._newer: list[int] = []
        self._gaps: list[Gap] = []
        self._lost_since: Position | None = None  # a gap waiting for a file to resume in
        self._offset = 0
        self._pending = b""
        self._ready: deque[TailedLine] = deque()  # read but not yet handed out
        # The first bytes of the files read before the current one, newest last: their
        # head marks, for a position saved in one of them (`head_of`).
        self._heads: dict[int, bytes] = {}
        if position is not None:
            self._open_saved(position, head)
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
            self._heads[self._inode] = os.pread(self._fh.fileno(), HEAD_BYTES, 0)
            while len(self._heads) > 4:
                del self._heads[next(iter(self._heads))]
            self._fh.close()
        self._fh = fh
        self._inode = os.fstat(fh.fileno()).st_ino
        self._opened_as = path
        size = os.fstat(fh.fileno()).st_size
        self._offset = size if seek_end else (offset if offset <= size else 0)
        fh.seek(self._offset)
        self._pending = b""
        if offset > size and not seek_end:
            # Truncated in place: what followed the saved offset is gone; start it over.
            self._gap("truncated", Position(self._inode, offset), path)
        if self._lost_since is not None:
            self._gap("rotated_away", self._lost_since, None)
            self._lost_since = None
        self._learn_order()
        return True

    def _learn_order(self, files: list[Path] | None = None,
                     inodes: list[int | None] | None = None) -> None:
        """Note which files are older and newer than the current one."""
        if files is None:
            files = self._candidates()
            inodes = [_inode(p) for p in files]
        if self._inode in inodes:
            i = inodes.index(self._inode)
            self._opened_as = files[i]
            self._older = {n for n in inodes[:i] if n is not None}
            self._newer = [n for n in inodes[i + 1:] if n is not None]

    def _gap(self, cause: str, lost_from: Position, lost_path: Path | None) -> None:
        """Note that reading resumes at the current position, not at `lost_from`."""
        self._gaps.append(Gap(cause, lost_from, None if lost_path is None else str(lost_path),
                              Position(self._inode, self._offset), str(self._opened_as)))

    def head_of(self, inode: int) -> str | None:
        """The head mark of the file with `inode`, the current one or one read before it
        (None: not known)."""
        if inode == self._inode and self._fh is not None:
            return head_mark(os.pread(self._fh.fileno(), HEAD_BYTES, 0))
        data = self._heads.get(inode)
        return None if data is None else head_mark(data)

    def _open_saved(self, pos: Position, head: str | None) -> None:
        for p in self._candidates():
            if _inode(p) == pos.inode:
                if _is_same_file(p, pos, head):
                    self._open(p, pos.offset)
                    return
                break       # its inode reused by a newer file: the saved file is gone
        # The saved file rotated out of reach: start with the oldest file still there (or the
        # first one to appear), and report the gap once that file is open.
        self._lost_since = pos
        for p in self._candidates():
            if self._open(p):
                return

    def _next_file(self) -> bool:
        """After EOF: move to the file that came after the current one, if any."""
        files = self._candidates()
        inodes = [_inode(p) for p in files]
        if self._inode in inodes:
            i = inodes.index(self._inode)
            self._learn_order(files, inodes)
            if i + 1 < len(files):
                return self._open(files[i + 1])
            return False
        # Our file is gone (read to its end through the open handle): go on with the
        # oldest file not known to be older than it. Unless that is the file known to come
        # next, the files between are gone too.
        nxt = next((p for p, n in zip(files, inodes) if n is not None and n not in self._older),
                   None)
        expected = self._newer[0] if self._newer else None
        gone, gone_as = Position(self._inode, self._offset), self._opened_as
        if nxt is None or not self._open(nxt):
            return False
        if self._inode != expected:
            self._gap("rotated_away", gone, gone_as)
        return True

    def _restart_if_truncated(self) -> bool:
        """At EOF: a file now shorter than what was read of it was truncated in place;
        read it again from its start."""
        if os.fstat(self._fh.fileno()).st_size >= self._offset:
            return False
        lost_from = Position(self._inode, self._offset - len(self._pending))
        self._offset = 0
        self._pending = b""
        self._fh.seek(0)
        self._gap("truncated", lost_from, self._opened_as)
        return True

    def _report_gaps(self) -> None:
        gaps, self._gaps = self._gaps, []
        for gap in gaps:
            if self.on_gap is not None:
                self.on_gap(gap)
            else:
                log.warning("%s: input lost (%s) from %s to %s", self.path, gap.cause,
                            *gap.to_json())

    def read_lines(self, max_lines: int = 10_000) -> list[TailedLine]:
        """Complete lines appended since the last call (at most max_lines)."""
        if self._fh is None and not self._open(self.path):
            return []
        ready = self._ready
        while len(ready) < max_lines:
            chunk = self._fh.read(self.chunk_bytes)
            if not chunk:
                if self._restart_if_truncated():
                    continue
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
        self._report_gaps()
        return [ready.popleft() for _ in range(min(max_lines, len(ready)))]

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None


class PositionStore:
    """Saved positions of one agent, one JSON file, replaced atomically. A source may save
    its file's head mark and a state (an aggregator's checkpoint) beside its position,
    saved and replaced with it: ``{name: {"inode", "offset"[, "head"][, "state"]}}``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def _raw(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}

    def load(self) -> dict[str, Position]:
        return {k: Position(v["inode"], v["offset"]) for k, v in self._raw().items()}

    def load_heads(self) -> dict[str, str]:
        """The head marks saved beside the positions (`head_mark`)."""
        return {k: v["head"] for k, v in self._raw().items() if v.get("head") is not None}

    def load_states(self) -> dict[str, dict]:
        """The states saved beside the positions (sources that saved none are absent)."""
        return {k: v["state"] for k, v in self._raw().items() if v.get("state") is not None}

    def save(self, positions: dict[str, Position],
             states: dict[str, dict] | None = None,
             heads: dict[str, str] | None = None) -> None:
        states, heads = states or {}, heads or {}
        unplaced = set(states) - set(positions)
        if unplaced:
            raise ValueError(f"states without a position: {sorted(unplaced)}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        out = {}
        for k, pos in positions.items():
            out[k] = pos.to_json()
            if heads.get(k) is not None:
                out[k]["head"] = heads[k]
            if states.get(k) is not None:
                out[k]["state"] = states[k]
        tmp.write_text(json.dumps(out))
        os.replace(tmp, self.path)
