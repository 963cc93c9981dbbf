"""The tailer follows log4j-style size rotation and resumes from saved positions."""

from __future__ import annotations

import os

import pytest

from ingest.file_tailer import FileTailer, PositionStore

pytestmark = pytest.mark.unit


def append(path, text):
    with open(path, "ab") as f:
        f.write(text.encode())


def rotate(path, keep=3):
    """What log4j2 DefaultRolloverStrategy does: x.log.2->.3, .1->.2, x.log->.1, new x.log."""
    for i in range(keep - 1, 0, -1):
        if os.path.exists(f"{path}.{i}"):
            os.replace(f"{path}.{i}", f"{path}.{i + 1}")
    os.replace(path, f"{path}.1")
    open(path, "wb").close()


def texts(lines):
    return [l.data.decode() for l in lines]


def test_partial_line_waits_for_its_newline(tmp_path):
    f = tmp_path / "r.log"
    append(f, "a\nb")
    t = FileTailer(f)
    assert texts(t.read_lines()) == ["a"]
    append(f, "c\n")
    assert texts(t.read_lines()) == ["bc"]
    assert t.read_lines() == []


def test_rotation_reads_old_file_to_end_then_new(tmp_path):
    f = tmp_path / "r.log"
    append(f, "1\n2\n")
    t = FileTailer(f)
    assert texts(t.read_lines()) == ["1", "2"]
    append(f, "3\n")          # written before the rollover, not yet read
    rotate(f)
    append(f, "4\n")
    assert texts(t.read_lines()) == ["3", "4"]


def test_restart_across_two_rotations_loses_and_repeats_nothing(tmp_path):
    f = tmp_path / "r.log"
    store = PositionStore(tmp_path / "pos.json")
    append(f, "1\n2\n")
    t = FileTailer(f)
    got = t.read_lines(max_lines=1)
    assert texts(got) == ["1"]
    store.save({"r": got[-1].after})        # delivered up to line 1, then the agent dies
    t.close()
    append(f, "3\n")
    rotate(f)
    append(f, "4\n")
    rotate(f)
    append(f, "5\n")
    t2 = FileTailer(f, store.load()["r"])
    assert texts(t2.read_lines()) == ["2", "3", "4", "5"]


def test_cut_last_line_of_rotated_file_is_handed_over(tmp_path):
    f = tmp_path / "r.log"
    append(f, "1\n{\"trunc")
    t = FileTailer(f)
    assert texts(t.read_lines()) == ["1"]
    rotate(f)
    append(f, "2\n")
    assert texts(t.read_lines()) == ['{"trunc', "2"]


def test_start_at_end_skips_history(tmp_path):
    f = tmp_path / "r.log"
    append(f, "old\n")
    t = FileTailer(f, start_at_end=True)
    append(f, "new\n")
    assert texts(t.read_lines()) == ["new"]


def test_file_truncated_in_place_starts_over(tmp_path):
    f = tmp_path / "r.log"
    append(f, "aaaa\nbbbb\n")
    t = FileTailer(f)
    pos = t.read_lines()[-1].after
    t.close()
    with open(f, "wb") as fh:
        fh.write(b"x\n")
    assert texts(FileTailer(f, pos).read_lines()) == ["x"]


def test_line_positions_are_byte_offsets(tmp_path):
    f = tmp_path / "r.log"
    append(f, "ab\ncde\n")
    lines = FileTailer(f).read_lines()
    assert [(l.start, l.after.offset) for l in lines] == [(0, 3), (3, 7)]
