"""Where kmon's logs go: the console for people, files for the records.

`kmon demo` and `kmon run` run for minutes with a console of their own: their steps,
progress, findings and summary. Everything logged goes to files under <work_dir>/logs/,
named at the start of the run:

- ``kmon-<command>-<stamp>.log``: Python's log records (kmon's, py4j's, warnings), at
  ``kmon.log_level``;
- ``kmon-<command>-<stamp>.stderr.log``: what native code writes on the process's
  standard error, which Python's logging never sees: librdkafka's log lines (its default
  logger prints there, and an AdminClient does not hand its lines to a Python `logger`)
  and the JVM's own (before log4j2 starts, or a crash);
- ``spark.log``: Spark's driver log (infra/resources/spark-log4j2.properties, rolled).

The newest `KEEP_RUNS` runs' files are kept per command. ``-v`` brings the records back
to the console (at DEBUG) and leaves standard error alone. Other commands log on
standard error, as short commands do.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from infra.spark_session import spark_log_file

KEEP_RUNS = 10
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Third-party loggers that are chatty at INFO.
NOISY = ("py4j", "infra.local_cluster.admin")


class RetriedPy4jCallFilter(logging.Filter):
    """py4j logs a call it retries on a new connection (the one it pooled was closed by the
    JVM) on the root logger at INFO, with a traceback; the retry succeeds. Those lines are
    shown only at DEBUG. A call that fails is logged at ERROR and always shown."""

    MESSAGE = "Exception while sending command."

    def filter(self, record: logging.LogRecord) -> bool:
        if (record.name == "root" and record.levelno == logging.INFO
                and record.getMessage() == self.MESSAGE):
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


@dataclass(frozen=True)
class LogFiles:
    records: Path   # Python's log records
    native: Path    # the process's standard error: librdkafka, the JVM
    spark: Path     # Spark's driver log

    def describe(self) -> str:
        """One line for the start of a run."""
        return (f"logs: {_short(self.records)} (librdkafka and the JVM: {self.native.name}, "
                f"Spark: {self.spark.name}, beside it; -v shows the log here)")


def log_files(work_dir: Path, command: str, now: float | None = None) -> LogFiles:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    folder = Path(work_dir) / "logs"
    base = folder / f"kmon-{command}-{stamp}"
    return LogFiles(base.with_suffix(".log"), base.with_suffix(".stderr.log"),
                    spark_log_file(work_dir))


def to_console(level: str, stream=None) -> None:
    """Log records on standard error (the short commands)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT, datefmt="%H:%M:%S"))
    _install([handler], level)


def to_files(files: LogFiles, level: str, *, verbose: bool = False, command: str = "") -> None:
    """Log records to `files.records` (and the console too when `verbose`); unless
    `verbose`, the process's standard error to `files.native`."""
    files.records.parent.mkdir(parents=True, exist_ok=True)
    if command:
        prune(files.records.parent, command, KEEP_RUNS - 1)
    handler = logging.FileHandler(files.records, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    handlers: list[logging.Handler] = [handler]
    if verbose:
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(logging.Formatter(FORMAT, datefmt="%H:%M:%S"))
        handlers.append(console)
    else:
        sys.stderr = redirect_native_stderr(files.native)
    _install(handlers, level)
    logging.captureWarnings(True)   # warnings.warn(...) from libraries: a record too


def redirect_native_stderr(path: Path):
    """Point file descriptor 2 (what librdkafka and the JVM Spark starts write to) at
    `path`; returns a text stream on the console's standard error for Python's own use
    (kmon's error messages, a traceback that ends the process)."""
    sys.stderr.flush()
    console_fd = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    return os.fdopen(console_fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace")


def prune(folder: Path, command: str, keep: int) -> None:
    """Keep the newest `keep` runs' files of `command` (records and native output)."""
    runs = sorted(folder.glob(f"kmon-{command}-*.log"))
    runs = [r for r in runs if not r.name.endswith(".stderr.log")]
    for old in runs[:max(0, len(runs) - keep)]:
        old.unlink(missing_ok=True)
        old.with_suffix(".stderr.log").unlink(missing_ok=True)


def _install(handlers: list[logging.Handler], level: str) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        h.addFilter(RetriedPy4jCallFilter())
        root.addHandler(h)
    root.setLevel(getattr(logging, level))
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _short(path: Path) -> str:
    """The path relative to the current folder when it is below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
