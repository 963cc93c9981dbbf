"""kmon/log_files.py: `kmon demo` and `kmon run` log to files, the console is for people."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kmon.log_files import log_files, prune

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

# What a run does: a log record, a line from native code on fd 2 (librdkafka, the JVM), a
# message kmon prints on standard error itself.
CHILD = textwrap.dedent("""
    import logging, os, sys, warnings
    sys.path.insert(0, sys.argv[1])
    from pathlib import Path
    from kmon.log_files import log_files, to_files
    files = log_files(Path(sys.argv[2]), "demo", now=0)
    to_files(files, "INFO", verbose=sys.argv[3] == "-v", command="demo")
    logging.getLogger("ingest.partition_offsets_agent").warning("ledger-0: no leader")
    warnings.warn("a library's warning")
    os.write(2, b"%3|1795360201.812|FAIL|rdkafka#producer-1| connect failed\\n")
    print("kmon: a message for the person at the console", file=sys.stderr)
""")


def run_child(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess, object]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(tmp_path), *flags, ""],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done, log_files(tmp_path, "demo", now=0)


def test_records_and_native_lines_go_to_files_and_the_console_keeps_kmons_own(tmp_path):
    done, files = run_child(tmp_path)
    assert done.stderr == "kmon: a message for the person at the console\n"
    records = files.records.read_text()
    assert "WARNING ingest.partition_offsets_agent: ledger-0: no leader" in records
    assert "a library's warning" in records
    assert "rdkafka#producer-1| connect failed" in files.native.read_text()
    assert files.records.parent == tmp_path / "logs" and files.spark.name == "spark.log"


def test_verbose_brings_the_records_and_native_lines_back_to_the_console(tmp_path):
    done, files = run_child(tmp_path, "-v")
    assert "WARNING ingest.partition_offsets_agent: ledger-0: no leader" in done.stderr
    assert "rdkafka#producer-1| connect failed" in done.stderr
    assert "ledger-0: no leader" in files.records.read_text()     # and still in the file


def test_the_newest_runs_are_kept_per_command(tmp_path):
    for stamp in ("20261126-010000", "20261126-020000", "20261126-030000"):
        for suffix in (".log", ".stderr.log"):
            (tmp_path / f"kmon-demo-{stamp}{suffix}").write_text("x")
    (tmp_path / "kmon-run-20261125-010000.log").write_text("x")
    prune(tmp_path, "demo", keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "kmon-demo-20261126-030000.log", "kmon-demo-20261126-030000.stderr.log",
        "kmon-run-20261125-010000.log"]


def test_the_start_line_names_the_files():
    files = log_files(Path("/w"), "run", now=0)
    text = files.describe()
    assert str(files.records) in text and files.native.name in text and "-v" in text
    assert files.native.parent == files.spark.parent == files.records.parent
    assert files.records.name.startswith("kmon-run-") and files.records.suffix == ".log"
