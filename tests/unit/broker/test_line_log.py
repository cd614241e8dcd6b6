"""line_log.append_durably: a line is appended whole or not at all, also when the disk fills
part-way through it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crossbeat.broker.line_log import append_durably, replace_atomically
from tests.support.smallfs import fill, small_filesystem


def test_an_append_the_disk_cuts_short_is_cut_back_off(tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    with small_filesystem(tmp_path / "mnt", 1) as mnt:
        path = mnt / "state.log"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # no O_APPEND, as offsets.log
        try:
            append_durably(fd, b"first\n")
            fill(mnt / "filler")  # the log's page still has room: the write below is partial
            with pytest.raises(OSError):
                append_durably(fd, b"x" * 10_000 + b"\n")
            assert path.read_bytes() == b"first\n"
            (mnt / "filler").unlink()
            append_durably(fd, b"second\n")
            assert path.read_bytes() == b"first\nsecond\n"  # right after, no hole, no torn line
        finally:
            os.close(fd)


def test_a_replacement_the_disk_refuses_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    with small_filesystem(tmp_path / "mnt", 1) as mnt:
        path = mnt / "state.json"
        replace_atomically(path, b"old\n")
        fill(mnt / "filler")
        with pytest.raises(OSError):
            replace_atomically(path, b"x" * 100_000)
        assert path.read_bytes() == b"old\n"
        assert sorted(os.listdir(mnt)) == ["filler", "state.json"]
