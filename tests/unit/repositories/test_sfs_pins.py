"""sfs reads that a deletion cannot cut short (`sfs_pins`): a read returns the bytes of the
object as it was when `read` returned, and the deleted object's files go once no read
needs them."""

from __future__ import annotations

import fcntl
import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crossbeat.repositories import NoSuchData
from crossbeat.repositories.sfs import SfsRepository
from crossbeat.repositories.sfs_pins import TRASH_PREFIX

from .conftest import SMALL_CHUNK


def payload(n: int, seed: int = 3) -> bytes:
    return bytes((i * 17 + seed) % 253 for i in range(n))


def left_in(sfs: SfsRepository, key: str) -> list[str]:
    """What remains in the object's fan-out directory: its directory, or one put aside."""
    fanout = sfs.root / key[-3:]
    return sorted(p.name for p in fanout.iterdir()) if fanout.exists() else []


def test_a_read_in_progress_outlives_a_delete(sfs: SfsRepository) -> None:
    data = payload(SMALL_CHUNK * 5 + 100)
    key = sfs.put_bytes(data).dataKey
    stream = sfs.read(key)
    first = next(stream)
    sfs.delete(key)
    # gone for everyone else at once...
    assert sfs.size(key) is None and key not in set(sfs.keys())
    with pytest.raises(NoSuchData):
        sfs.read(key)
    assert left_in(sfs, key) == [f"{TRASH_PREFIX}{key}"]
    # ...but the read that had begun gets every byte, verified
    assert first + b"".join(stream) == data
    assert left_in(sfs, key) == []  # the last read removed it


def test_a_read_not_yet_iterated_holds_the_data_from_the_call(sfs: SfsRepository) -> None:
    data = payload(SMALL_CHUNK * 3)
    key = sfs.put_bytes(data).dataKey
    stream = sfs.read(key, 10, len(data) - 10)
    sfs.delete(key)
    assert b"".join(stream) == data[10:-10]
    assert left_in(sfs, key) == []


def test_a_one_chunk_read_holds_its_file(sfs: SfsRepository) -> None:
    data = payload(SMALL_CHUNK * 3)
    key = sfs.put_bytes(data).dataKey
    stream = sfs.read(key, SMALL_CHUNK + 5, 2 * SMALL_CHUNK - 5)  # inside chunk 1 only
    sfs.delete(key)
    assert left_in(sfs, key) == []  # nothing pinned: removed at once
    assert b"".join(stream) == data[SMALL_CHUNK + 5 : 2 * SMALL_CHUNK - 5]


def test_the_last_of_several_reads_removes_the_object(sfs: SfsRepository) -> None:
    data = payload(SMALL_CHUNK * 4)
    key = sfs.put_bytes(data).dataKey
    a, b = sfs.read(key), sfs.read(key)
    assert next(a) == next(b) == data[:SMALL_CHUNK]
    sfs.delete(key)
    assert b"".join(a) == data[SMALL_CHUNK:]
    assert left_in(sfs, key) == [f"{TRASH_PREFIX}{key}"]  # b still reads it
    assert b"".join(b) == data[SMALL_CHUNK:]
    assert left_in(sfs, key) == []


def test_an_abandoned_read_releases_the_object(sfs: SfsRepository) -> None:
    key = sfs.put_bytes(payload(SMALL_CHUNK * 4)).dataKey
    stream = sfs.read(key)
    next(stream)
    sfs.delete(key)
    assert left_in(sfs, key) == [f"{TRASH_PREFIX}{key}"]
    del stream
    gc.collect()
    assert left_in(sfs, key) == []


def test_an_unread_object_is_deleted_at_once(sfs: SfsRepository) -> None:
    key = sfs.put_bytes(payload(SMALL_CHUNK * 4)).dataKey
    b"".join(sfs.read(key))  # a read that ended pins nothing
    sfs.delete(key)
    assert left_in(sfs, key) == []


def test_a_read_cannot_begin_while_a_delete_removes_the_object(sfs: SfsRepository) -> None:
    key = sfs.put_bytes(payload(SMALL_CHUNK * 4)).dataKey
    fd = os.open(sfs.root / key[-3:] / key, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what delete holds while it removes the files
        with pytest.raises(NoSuchData):
            sfs.read(key)
    finally:
        os.close(fd)
    assert len(b"".join(sfs.read(key))) == SMALL_CHUNK * 4


def test_cleanup_removes_what_a_crash_left_aside_but_not_what_a_read_pins(sfs: SfsRepository) -> None:
    data = payload(SMALL_CHUNK * 4)
    crashed = sfs.put_bytes(data).dataKey
    read = sfs.put_bytes(data).dataKey
    # a delete that crashed after putting the directory aside
    os.rename(sfs.root / crashed[-3:] / crashed, sfs.root / crashed[-3:] / f"{TRASH_PREFIX}{crashed}")
    stream = sfs.read(read)
    next(stream)
    sfs.delete(read)
    assert sfs.cleanup(lambda key: True, older_than_s=0) == []
    assert left_in(sfs, crashed) == []
    assert left_in(sfs, read) == [f"{TRASH_PREFIX}{read}"]
    assert b"".join(stream) == data[SMALL_CHUNK:]
    assert left_in(sfs, read) == []


def test_a_read_in_another_process_outlives_a_delete(sfs: SfsRepository, tmp_path: Path) -> None:
    """Gateway workers are processes: one's delete must not cut another's read short."""
    data = payload(SMALL_CHUNK * 6)
    key = sfs.put_bytes(data).dataKey
    child = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys\n"
            "from crossbeat.repositories.sfs import SfsRepository\n"
            f"repo = SfsRepository('local', {str(sfs.root)!r}, chunk_size={SMALL_CHUNK})\n"
            f"stream = repo.read({key!r})\n"
            "first = next(stream)\n"
            "print('reading', flush=True)\n"
            "sys.stdin.readline()\n"
            "sys.stdout.buffer.write(first + b''.join(stream))\n"
        )],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline() == b"reading\n"
    sfs.delete(key)
    assert sfs.size(key) is None
    assert left_in(sfs, key) == [f"{TRASH_PREFIX}{key}"]
    out, _ = child.communicate(b"go\n", timeout=60)
    assert child.returncode == 0
    assert out == data
    assert left_in(sfs, key) == []
