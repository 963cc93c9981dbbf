"""The tailer follows log4j-style size rotation and resumes from saved positions."""

from __future__ import annotations

import os

import pytest

from ingest.file_tailer import FileTailer, PositionStore, head_mark

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


# ---- gaps: input the tailer cannot read back is reported, not skipped silently ------------

def tailer_with_gaps(f, position=None):
    gaps = []
    return FileTailer(f, position, on_gap=gaps.append), gaps


def test_saved_file_rotated_out_of_reach_is_a_gap_to_the_oldest_file_left(tmp_path):
    f = tmp_path / "r.log"
    append(f, "1\n")
    t = FileTailer(f)
    saved = t.read_lines()[-1].after
    t.close()
    # Held open so its inode is not reused by a newer file (ext4 reuses a freed inode at
    # once, and a position is an inode: see the limits in ingest/file_tailer.py).
    with open(f, "rb"):
        for text in ("lost", "3", "4", "5", "6"):   # five rollovers, three files kept
            rotate(f, keep=3)
            append(f, text + "\n")
    t2, gaps = tailer_with_gaps(f, saved)
    assert gaps == []                       # reported by read_lines, not when built
    assert texts(t2.read_lines()) == ["3", "4", "5", "6"]
    [gap] = gaps
    oldest = f"{f}.3"
    assert gap.cause == "rotated_away"
    assert gap.lost_from == saved and gap.lost_path is None
    assert gap.resumed_path == oldest and gap.resumed_at.offset == 0
    assert t2.read_lines() == [] and len(gaps) == 1


def test_file_deleted_while_read_goes_on_with_the_next_file_not_the_live_one(tmp_path):
    # Fixed: the tailer used to jump to the live file, skipping the rotated files between.
    f = tmp_path / "r.log"
    append(f, "1\n")
    rotate(f, keep=3)
    append(f, "2\n")
    rotate(f, keep=3)
    append(f, "3\n")
    t, gaps = tailer_with_gaps(f)           # starts with the live file; .1 and .2 are older
    assert texts(t.read_lines()) == ["3"]
    rotate(f, keep=3)
    append(f, "4\n")
    rotate(f, keep=3)                       # "3" is now .2, "4" .1
    append(f, "5\n")
    assert texts(t.read_lines(max_lines=1)) == ["4"]
    append(f, "6\n")
    os.remove(f"{f}.1")                     # the file being read disappears; "3" is older
    assert texts(t.read_lines()) == ["5", "6"] and gaps == []


def test_file_and_its_successor_rotated_away_while_read_is_a_gap(tmp_path):
    f = tmp_path / "r.log"
    append(f, "a1\na2\n")
    t, gaps = tailer_with_gaps(f)
    assert texts(t.read_lines(max_lines=1)) == ["a1"]
    inode_a = t.position.inode
    for i in range(1, 5):                   # the writer rolls 4 times; 2 files kept
        rotate(f, keep=2)
        append(f, "lost\n" if i == 1 else f"b{i}\n")    # "lost" rolls away with "a"
    assert texts(t.read_lines()) == ["a2", "b2", "b3", "b4"]   # the open file, then on
    [gap] = gaps
    assert gap.cause == "rotated_away"
    assert gap.lost_from == (inode_a, 6) and gap.lost_path == str(f)
    assert gap.resumed_path == f"{f}.2" and gap.resumed_at.offset == 0


def test_truncated_while_down_is_a_gap_and_starts_over(tmp_path):
    f = tmp_path / "r.log"
    append(f, "aaaa\nbbbb\n")
    t = FileTailer(f)
    pos = t.read_lines()[-1].after
    t.close()
    with open(f, "wb") as fh:
        fh.write(b"x\n")
    t2, gaps = tailer_with_gaps(f, pos)
    assert texts(t2.read_lines()) == ["x"]
    assert gaps == [("truncated", pos, str(f), (pos.inode, 0), str(f))]


def test_truncated_while_read_is_a_gap_and_starts_over(tmp_path):
    f = tmp_path / "r.log"
    append(f, "aaaa\nbbbb\n")
    t, gaps = tailer_with_gaps(f)
    assert texts(t.read_lines()) == ["aaaa", "bbbb"]
    with open(f, "r+b") as fh:              # truncated in place, as copytruncate does
        fh.truncate(0)
    append(f, "x\n")
    assert texts(t.read_lines()) == ["x"]
    inode = os.stat(f).st_ino
    assert gaps == [("truncated", (inode, 10), str(f), (inode, 0), str(f))]
    assert t.read_lines() == [] and len(gaps) == 1


# ---- a saved file's inode taken by a newer file (ext4 reuses freed inodes) ----------------

def reuse_inode(path, text: str) -> None:
    """What a newer file that got the saved file's freed inode looks like to the tailer: the
    same inode, other content. (Rewritten in place: a real reuse cannot be forced.)"""
    with open(path, "r+b") as fh:
        fh.truncate(0)
        fh.write(text.encode())


def test_a_newer_file_with_the_saved_inode_is_not_read_from_the_saved_offset(tmp_path):
    f = tmp_path / "r.log"
    append(f, "old-1\nold-2\n")
    t = FileTailer(f)
    saved = t.read_lines()[-1].after
    mark = t.head_of(saved.inode)
    t.close()
    reuse_inode(f, "new-1\nnew-2\nnew-3\nnew-4\n")  # longer than the saved offset
    t2 = FileTailer(f, saved, head=mark, on_gap=(gaps := []).append)
    assert texts(t2.read_lines()) == ["new-1", "new-2", "new-3", "new-4"]
    [gap] = gaps
    assert gap.cause == "rotated_away" and gap.lost_from == saved
    assert gap.resumed_at == (saved.inode, 0) and gap.resumed_path == str(f)
    # Without the mark (a position saved before marks were kept) it cannot tell.
    t3 = FileTailer(f, saved)
    assert texts(t3.read_lines()) == ["new-3", "new-4"]


def test_the_saved_file_itself_resumes_at_its_offset(tmp_path):
    f = tmp_path / "r.log"
    append(f, "a\n")
    t = FileTailer(f)
    saved = t.read_lines()[-1].after
    mark = t.head_of(saved.inode)
    append(f, "b\n")                        # grew after the mark was taken: still itself
    rotate(f, keep=3)
    append(f, "c\n")
    t2, gaps = FileTailer(f, saved, head=mark, on_gap=(g := []).append), g
    assert texts(t2.read_lines()) == ["b", "c"] and gaps == []
    # the mark of a file read before the current one is kept, for a position saved there
    assert t2.head_of(saved.inode) == head_mark(b"a\nb\n")
    assert t2.head_of(os.stat(f).st_ino) == head_mark(b"c\n")


def test_a_file_shorter_than_the_saved_offset_is_truncated_whatever_its_head(tmp_path):
    f = tmp_path / "r.log"
    append(f, "aaaa\nbbbb\n")
    t = FileTailer(f)
    saved = t.read_lines()[-1].after
    mark = t.head_of(saved.inode)
    reuse_inode(f, "x\n")
    t2 = FileTailer(f, saved, head=mark, on_gap=(gaps := []).append)
    assert texts(t2.read_lines()) == ["x"]
    assert [g.cause for g in gaps] == ["truncated"]


def test_head_marks_are_saved_beside_the_positions(tmp_path):
    from ingest.file_tailer import Position
    store = PositionStore(tmp_path / "p.json")
    store.save({"a": Position(1, 10), "b": Position(2, 0)}, heads={"a": "10:0badcafe"})
    assert store.load() == {"a": (1, 10), "b": (2, 0)}
    assert store.load_heads() == {"a": "10:0badcafe"}
