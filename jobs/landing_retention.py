"""The landing folder kept bounded: a file goes once the query that reads it is past it.

In the embedded mode the agents write JSON-lines files under ``landing/<stream>/`` and the
silver queries read them with Spark's file source. Nothing else removes them, so a kmon
left running keeps every file it was ever sent. A maintenance pass (jobs/maintenance.py)
deletes a landing file when both hold:

- **A committed batch read it.** Each file-source query records, per batch, the files it
  planned in its checkpoint's source log (``_checkpoints/<query>/sources/<n>/``, a line of
  JSON per file with its ``path`` and ``batchId``), and writes ``commits/<batchId>`` once
  the batch's output is committed. A file in a batch at or below the last commit is in
  silver (or quarantine) for good; a file planned in a batch not committed yet, or not
  planned at all, stays.
- **It is older than ``landing_retain_h``**, so the raw copy of recent telemetry stays
  there to look at or replay.

Spark's own ``cleanSource`` option deletes files too, but for every file source at once and
with no age: a matrix run records the landing folder after each scenario (tests/corpus/),
and a replay copies recorded files into a fresh lake. Here only files a committed batch of
this lake's checkpoints names are touched, so a copied folder no checkpoint has read yet is
safe. Reading the source log directly is reading Spark's on-disk format (version ``v1``,
the same since Spark 2.0); a line of another shape is ignored, which can only keep a file.

**The source log forgets the files deleted.** Spark's file source never drops an entry
from its log: every tenth batch it rewrites a ``<n>.compact`` file that lists every file
the query ever read (SPARK-17604, unmerged), about 165 bytes each, so the checkpoint
grows with every landing file forever and a restart reads the whole list into memory.
An entry is only needed while its file can still be listed: a file that is gone cannot
be read again. So after deleting, the pass rewrites each ``.compact`` file without the
entries of files that are gone from a landing folder it listed and that a committed batch
read; every other entry, and any file of a shape it does not know, stays as it was. The
rewrite replaces the file whole (written aside, then renamed over it), so Spark reads
either list. It is done on the local file system only (where the embedded mode's lake
is); elsewhere the log grows as before. The next compaction starts from the shorter list,
so the log holds about `landing_retain_h` of files.

The Kafka source (``pipeline.source = "kafka"``) has no landing folder: Kafka's retention
bounds it there.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable
from urllib.parse import unquote, urlparse

from infra.lake import Lake

log = logging.getLogger(__name__)

_LOG_FILE = re.compile(r"^(\d+)(\.compact)?$")


def normalized(uri: str) -> str:
    """One spelling of a file's location: Spark's source log writes ``file:///a/b%20c``,
    a Hadoop listing gives ``file:/a/b c``."""
    u = urlparse(uri)
    scheme = u.scheme or "file"
    path = re.sub(r"/{2,}", "/", unquote(u.path))
    return f"{scheme}://{u.netloc}{path}"


def log_batch(name: str) -> int | None:
    """The batch id a source-log or commits file is named for (``12``, ``19.compact``);
    None for anything else (``.12.crc``, a temporary file)."""
    m = _LOG_FILE.match(name)
    return int(m.group(1)) if m else None


def source_log_entries(text: str) -> list[tuple[str, int]]:
    """(path, batchId) of each file a source-log file lists. The first line is the format
    version; a line that is not a file entry (another source's offsets) is skipped."""
    out = []
    for line in text.splitlines()[1:]:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("path"), str) \
                and isinstance(entry.get("batchId"), int):
            out.append((entry["path"], entry["batchId"]))
    return out


def consumed_files(source_logs: Iterable[str], last_committed: int | None) -> set[str]:
    """The files (normalized) that batches up to `last_committed` read."""
    if last_committed is None:
        return set()
    return {normalized(path) for text in source_logs
            for path, batch in source_log_entries(text) if batch <= last_committed}


def forget_gone(text: str, last_committed: int | None,
                gone: Callable[[str], bool]) -> tuple[str, int] | None:
    """`text`, a compacted source log, without the entries of files that a batch up to
    `last_committed` read and that are `gone` (called with the normalized path), and how
    many went; None when none goes, or when the log is not the ``v1`` list of file entries
    this knows (left alone: keeping an entry can only cost bytes)."""
    lines = text.split("\n")
    if lines[0] != "v1" or last_committed is None:
        return None
    kept, dropped = [lines[0]], 0
    for line in lines[1:]:
        try:
            entry = json.loads(line)
        except ValueError:
            return None
        if not (isinstance(entry, dict) and isinstance(entry.get("path"), str)
                and isinstance(entry.get("batchId"), int)):
            return None
        if entry["batchId"] <= last_committed and gone(normalized(entry["path"])):
            dropped += 1
        else:
            kept.append(line)
    return ("\n".join(kept), dropped) if dropped else None


def to_delete(files: Iterable[tuple[str, int, int]], consumed: set[str], now_ms: int,
              retain_h: float) -> list[tuple[str, int]]:
    """Of the landing files (path, modified ms, bytes), those read by a committed batch
    and older than `retain_h`: (path, bytes)."""
    cutoff = now_ms - int(retain_h * 3_600_000)
    return [(path, size) for path, mtime, size in files
            if mtime < cutoff and normalized(path) in consumed]


@dataclass
class StreamOutcome:
    stream: str
    files_before: int = 0
    bytes_before: int = 0
    files_deleted: int = 0
    bytes_deleted: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def files_after(self) -> int:
        return self.files_before - self.files_deleted

    @property
    def bytes_after(self) -> int:
        return self.bytes_before - self.bytes_deleted


@dataclass
class SourceLog:
    """One file-source query's log: the last batch its query committed, and its files
    (Hadoop status, text)."""
    last_committed: int
    files: list


class LandingRetention:
    """Deletes the landing files the lake's queries have committed past and that are older
    than `retain_h` (through Hadoop's file APIs: any storage the lake is on), then drops
    them from the queries' source logs (module docstring)."""

    def __init__(self, spark, lake: Lake, retain_h: float, clock) -> None:
        self.spark, self.lake, self.retain_h, self.clock = spark, lake, retain_h, clock
        self._jvm = spark.sparkContext._jvm
        self._hconf = spark.sparkContext._jsc.hadoopConfiguration()
        self.forgotten = 0      # source-log entries the last run dropped

    def _path(self, location: str):
        return self._jvm.org.apache.hadoop.fs.Path(location)

    def _fs(self, path):
        return path.getFileSystem(self._hconf)

    def _list(self, location: str) -> list:
        p = self._path(location)
        fs = self._fs(p)
        return list(fs.listStatus(p)) if fs.exists(p) else []

    def _read(self, status) -> str:
        """The whole file in one call across the JVM bridge (a compacted source log holds a
        line per file ever read: a call per line would cost a round trip each)."""
        stream = self._fs(status.getPath()).open(status.getPath())
        try:
            return self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()

    @staticmethod
    def _replace(status, text: str) -> None:
        """`status`'s file (on the local file system) replaced whole by `text`: written
        under a dot-name beside it, its checksum file removed, then renamed over it. A
        reader sees the old list with or without its checksum, or the new one without:
        never a list with another's checksum (Hadoop verifies one when it is there)."""
        path = Path(unquote(urlparse(status.getPath().toString()).path))
        if not path.exists():            # Spark expired it meanwhile: not brought back
            return
        tmp = path.with_name(f".{path.name}.kmon.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
        os.replace(tmp, path)

    def source_logs(self) -> list[SourceLog]:
        """The source logs of the lake's queries that have committed a batch."""
        out = []
        for query in self._list(self.lake.checkpoint("")):
            if not query.isDirectory():
                continue
            base = query.getPath().toString()
            commits = [b for s in self._list(f"{base}/commits")
                       if (b := log_batch(s.getPath().getName())) is not None]
            if not commits:
                continue
            for source in self._list(f"{base}/sources"):
                if source.isDirectory():
                    files = [(s, self._read(s))
                             for s in self._list(source.getPath().toString())
                             if log_batch(s.getPath().getName()) is not None]
                    out.append(SourceLog(max(commits), files))
        return out

    @staticmethod
    def consumed(logs: list[SourceLog]) -> set[str]:
        """Every file a committed batch of any of the `logs`' queries read."""
        out: set[str] = set()
        for sl in logs:
            out |= consumed_files([text for _, text in sl.files], sl.last_committed)
        return out

    def run(self) -> list[StreamOutcome]:
        """One pass over every landing/<stream>/ folder; what it deleted, per stream. Then
        the deleted files, and any other gone, leave the source logs (`forgotten`)."""
        # The logs are read before the folders are listed: a file a committed batch read
        # was there before the listing, so one missing from the listing is gone for good.
        logs = self.source_logs()
        consumed = self.consumed(logs)
        now = self.clock()
        outcomes, folders, present = [], set(), set()
        for folder in self._list(self.lake.landing_root):
            if not folder.isDirectory():
                continue
            out = StreamOutcome(folder.getPath().getName())
            folders.add(normalized(folder.getPath().toString()))
            files = [(s.getPath().toString(), s.getModificationTime(), s.getLen())
                     for s in self._list(folder.getPath().toString())
                     if s.isFile() and not s.getPath().getName().startswith((".", "_"))]
            out.files_before, out.bytes_before = len(files), sum(f[2] for f in files)
            deleted = set()
            for path, size in to_delete(files, consumed, now, self.retain_h):
                try:
                    p = self._path(path)
                    if self._fs(p).delete(p, False):
                        deleted.add(path)
                        out.files_deleted += 1
                        out.bytes_deleted += size
                except Exception as e:  # noqa: BLE001 - the next pass tries again
                    out.errors.append(f"{path}: {type(e).__name__}: {str(e)[:200]}")
            present |= {normalized(f[0]) for f in files if f[0] not in deleted}
            if out.errors:
                log.warning("landing retention: %d files of landing/%s not deleted, first: %s",
                            len(out.errors), out.stream, out.errors[0])
            outcomes.append(out)
        self.forgotten = self.forget(logs, folders, present)
        return outcomes

    def forget(self, logs: list[SourceLog], folders: set[str], present: set[str]) -> int:
        """Each compacted source log rewritten without the files gone from `folders` (the
        landing folders listed, normalized); `present` is what the listing found. How many
        entries went."""
        def gone(path: str) -> bool:
            return path.rsplit("/", 1)[0] in folders and path not in present

        dropped = 0
        for sl in logs:
            for status, text in sl.files:
                if not status.getPath().getName().endswith(".compact"):
                    continue
                if status.getPath().toUri().getScheme() != "file":
                    continue
                pruned = forget_gone(text, sl.last_committed, gone)
                if pruned is None:
                    continue
                try:
                    self._replace(status, pruned[0])
                    dropped += pruned[1]
                except Exception as e:  # noqa: BLE001 - the log only stays longer
                    log.warning("landing retention: could not rewrite %s: %s",
                                status.getPath().toString(), str(e)[:200])
        if dropped:
            log.info("landing retention: %d entries of deleted landing files dropped from "
                     "the queries' source logs", dropped)
        return dropped
