"""sfs under a crash (SIGKILL mid-write), cleanup of leftovers, and bounded memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from crossbeat.repositories.sfs import SfsRepository

from .sfs_crash_writer import content

MiB = 1024 * 1024
REPO_ROOT = Path(__file__).resolve().parents[3]


def object_dirs(root: Path) -> set[str]:
    return {p.name for fanout in root.iterdir() if fanout.is_dir() for p in fanout.iterdir()}


@pytest.mark.timeout(120)
def test_sigkill_mid_write_loses_nothing_acknowledged(tmp_path: Path) -> None:
    root = tmp_path / "sfs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.unit.repositories.sfs_crash_writer", str(root)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    assert proc.stdout is not None
    tag, stuck = proc.stdout.readline().split()
    assert tag == "PARTIAL"
    acked: dict[str, int] = {}
    deadline = time.monotonic() + 60
    while len(acked) < 150 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        key, size_text = line.split()
        acked[key] = int(size_text)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    # Lines written before the kill but not yet read are acknowledged too.
    for line in proc.stdout.read().splitlines():
        key, size_text = line.split()
        acked[key] = int(size_text)
    assert len(acked) >= 150, "the writer did not get going"

    repo = SfsRepository("crash", root, chunk_size=1024)
    for key, size in acked.items():
        assert repo.size(key) == size
        assert repo.read_bytes(key) == content(key, size)
    on_disk = object_dirs(root)
    partial = on_disk - set(repo.keys())
    assert stuck in partial

    removed = repo.cleanup(lambda key: key in acked, older_than_s=0)
    assert partial <= set(removed)
    assert set(removed).isdisjoint(acked)
    assert object_dirs(root) == set(acked)  # no orphan files remain
    for key, size in acked.items():
        assert repo.read_bytes(key) == content(key, size)
        names = os.listdir(root / key[-3:] / key)
        assert sorted(names) == (["chunks", "manifest.json"] if size else ["manifest.json"])


def age(path: Path, seconds: float) -> None:
    """Backdate every file and directory under `path`."""
    then = time.time() - seconds
    for p in [path, *path.rglob("*")]:
        os.utime(p, (then, then))


def test_cleanup_respects_age_and_references(sfs: SfsRepository) -> None:
    referenced = sfs.put_bytes(b"in use").dataKey
    orphan = sfs.put_bytes(b"nobody points here").dataKey
    young_orphan = sfs.put_bytes(b"metadata not written yet").dataKey
    abandoned = sfs.writer()
    abandoned.write(b"x" * 5000)  # chunks on disk, never committed
    in_flight = sfs.writer()
    in_flight.write(b"y" * 5000)
    for key in (referenced, orphan, abandoned.data_key):
        age(sfs.root / key[-3:] / key, 7200)

    removed = sfs.cleanup(lambda key: key == referenced, older_than_s=3600)
    assert sorted(removed) == sorted([orphan, abandoned.data_key])
    assert sorted(sfs.keys()) == sorted([referenced, young_orphan])
    assert not (sfs.root / orphan[-3:] / orphan).exists()
    assert not (sfs.root / abandoned.data_key[-3:] / abandoned.data_key).exists()
    in_flight.write(b"z" * 100)  # the young in-flight write was left alone
    loc = in_flight.commit()
    assert sfs.read_bytes(loc.dataKey) == b"y" * 5000 + b"z" * 100
    assert sfs.read_bytes(referenced) == b"in use"


def test_memory_stays_bounded_writing_and_reading_64_mib(tmp_path: Path) -> None:
    repo = SfsRepository("big", tmp_path, chunk_size=MiB)
    aligned = os.urandom(MiB)
    ragged = aligned[:-1] + b"!" + aligned[:777]  # pieces that straddle chunk boundaries
    tracemalloc.start()
    try:
        for piece in (aligned, ragged):
            tracemalloc.reset_peak()
            with repo.writer() as w:
                while w.bytes_written < 64 * MiB:
                    w.write(piece)
                loc = w.commit()
            _, peak = tracemalloc.get_traced_memory()
            assert peak < 4 * MiB, f"writing in {len(piece)}-byte pieces peaked at {peak}"
            tracemalloc.reset_peak()
            total = 0
            for part in repo.read(loc.dataKey):
                total += len(part)
            _, peak = tracemalloc.get_traced_memory()
            assert total == loc.size
            assert peak < 4 * MiB, f"reading peaked at {peak}"
    finally:
        tracemalloc.stop()


def test_cleanup_never_removes_an_object_that_committed_meanwhile(sfs: SfsRepository) -> None:
    key = sfs.put_bytes(b"just committed").dataKey
    path = sfs.object_dir(key)
    assert sfs._discard(path) is False  # the manifest is there: put back, untouched
    assert sfs.read_bytes(key) == b"just committed"


def test_a_writer_whose_directory_was_cleaned_up_fails_cleanly(sfs: SfsRepository) -> None:
    from crossbeat.repositories import RepositoryError

    w = sfs.writer()
    w.write(b"a" * 3000)
    age(Path(sfs.object_dir(w.data_key)), 7200)
    assert sfs.cleanup(lambda _k: False, older_than_s=3600) == [w.data_key]
    with pytest.raises(RepositoryError):
        w.write(b"b" * 3000)
        w.commit()
    assert sfs.size(w.data_key) is None and list(sfs.keys()) == []


def test_cleanup_removes_trash_left_by_a_crashed_cleanup(sfs: SfsRepository) -> None:
    key = sfs.put_bytes(b"x").dataKey
    trash = sfs.root / key[-3:] / f".cleanup-{key}zz"
    (trash / "chunks" / "0").mkdir(parents=True)
    sfs.cleanup(lambda _k: True, older_than_s=0)
    assert not trash.exists()
    assert sfs.read_bytes(key) == b"x"
