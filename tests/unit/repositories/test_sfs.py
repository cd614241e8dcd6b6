"""The seed-003 simple filesystem repository: layout, round trips, verification, locking."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from crossbeat.repositories import CorruptData, Location, NoSuchData, RepositoryError
from crossbeat.repositories.sfs import SfsRepository

from .conftest import SMALL_CHUNK


def payload(n: int, seed: int = 7) -> bytes:
    return bytes((i * 31 + seed) % 251 for i in range(n))


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_layout_on_disk_is_the_seeds(sfs: SfsRepository) -> None:
    data = payload(SMALL_CHUNK * 105 + 10)  # 106 chunks: groups 0 and 1
    loc = sfs.put_bytes(data)
    key = loc.dataKey
    assert loc == Location("local", key, len(data))
    obj = sfs.root / key[-3:] / key
    assert (obj / "manifest.json").is_file()
    chunk_files = sorted(files_under(obj / "chunks"), key=lambda p: int(p.rsplit("-", 1)[1]))
    assert chunk_files == [f"{i // 100}/{key}-{i}" for i in range(106)]
    assert files_under(obj) == sorted(["manifest.json", *(f"chunks/{c}" for c in chunk_files)])
    assert files_under(sfs.root) == sorted(
        ["repository.json", *(f"{key[-3:]}/{key}/{f}" for f in files_under(obj))]
    )
    assert (obj / "chunks" / "1" / f"{key}-105").stat().st_size == 10
    assert sorted(os.listdir(obj / "chunks")) == ["0", "1"]


def test_manifest_contents(sfs: SfsRepository) -> None:
    loc = sfs.put_bytes(payload(2500))
    manifest = json.loads((sfs.root / loc.dataKey[-3:] / loc.dataKey / "manifest.json").read_text())
    assert manifest["size"] == 2500
    assert manifest["chunkSize"] == SMALL_CHUNK
    assert manifest["chunkCount"] == 3
    assert manifest["digestAlgorithm"] == "siphash-2-4"
    assert len(manifest["digests"]) == 3
    assert manifest["locked"] is False
    assert manifest["created"] > 1.7e9
    assert manifest["digests"][0] == sfs.digest(payload(2500)[:SMALL_CHUNK])


def test_object_ids_vary_fastest_at_the_end(sfs: SfsRepository) -> None:
    keys = [sfs.writer().data_key for _ in range(200)]
    assert len({k[-3:] for k in keys}) > 150  # spread over fan-out directories
    assert len({k[:8] for k in keys}) <= 2  # the head is the slowly moving timestamp


@pytest.mark.parametrize("size", [0, 1, SMALL_CHUNK - 1, SMALL_CHUNK, SMALL_CHUNK + 1, 10_000])
def test_round_trip(sfs: SfsRepository, size: int) -> None:
    data = payload(size)
    with sfs.writer() as w:
        for i in range(0, size, 333):  # odd-sized writes straddle chunk boundaries
            w.write(data[i : i + 333])
        loc = w.commit()
    assert loc.size == size
    assert sfs.size(loc.dataKey) == size
    assert sfs.read_bytes(loc.dataKey) == data
    assert list(sfs.keys()) == [loc.dataKey]


def test_range_reads_match_slices(sfs: SfsRepository) -> None:
    data = payload(5000)
    key = sfs.put_bytes(data).dataKey
    for start, end in [
        (0, 1),
        (0, 5000),
        (1023, 1025),
        (1024, 2048),
        (4999, 5000),
        (3000, None),
        (5000, None),
        (100, 100),
        (4000, 9999),
    ]:
        assert sfs.read_bytes(key, start, end) == data[start:end], (start, end)
    with pytest.raises(RepositoryError):
        sfs.read(key, 5001)
    with pytest.raises(RepositoryError):
        sfs.read(key, -1)
    with pytest.raises(RepositoryError):
        sfs.read(key, 10, 5)


def test_range_read_touches_only_needed_chunks(sfs: SfsRepository) -> None:
    data = payload(SMALL_CHUNK * 10)
    key = sfs.put_bytes(data).dataKey
    chunks = sfs.root / key[-3:] / key / "chunks" / "0"
    # Destroy every chunk except 3 and 4: a read of bytes within them must still work.
    for i in range(10):
        if i not in (3, 4):
            (chunks / f"{key}-{i}").unlink()
    start, end = 3 * SMALL_CHUNK + 5, 5 * SMALL_CHUNK - 5
    assert sfs.read_bytes(key, start, end) == data[start:end]
    with pytest.raises(CorruptData):
        sfs.read_bytes(key, start, end + 10)


def test_corrupt_byte_is_detected_and_never_returned(sfs: SfsRepository) -> None:
    data = payload(SMALL_CHUNK * 3)
    key = sfs.put_bytes(data).dataKey
    chunk = sfs.root / key[-3:] / key / "chunks" / "0" / f"{key}-1"
    raw = bytearray(chunk.read_bytes())
    raw[17] ^= 0x01
    chunk.write_bytes(bytes(raw))
    received = []
    with pytest.raises(CorruptData) as info:
        for piece in sfs.read(key):
            received.append(piece)
    assert received == [data[:SMALL_CHUNK]]  # chunk 0 only; nothing of chunk 1
    assert key in str(info.value) and "chunk 1" in str(info.value)
    assert info.value.data_key == key and info.value.chunk == 1
    # A range inside the undamaged chunks still reads.
    assert sfs.read_bytes(key, 2 * SMALL_CHUNK) == data[2 * SMALL_CHUNK :]


def test_truncated_and_extended_chunks_are_corrupt(sfs: SfsRepository) -> None:
    key = sfs.put_bytes(payload(SMALL_CHUNK * 2)).dataKey
    chunk = sfs.root / key[-3:] / key / "chunks" / "0" / f"{key}-0"
    good = chunk.read_bytes()
    chunk.write_bytes(good[:-1])
    with pytest.raises(CorruptData, match=key):
        sfs.read_bytes(key)
    chunk.write_bytes(good + b"x")
    with pytest.raises(CorruptData, match=key):
        sfs.read_bytes(key)
    chunk.write_bytes(good)
    assert len(sfs.read_bytes(key)) == SMALL_CHUNK * 2


def test_corrupt_manifest_is_a_clear_error(sfs: SfsRepository) -> None:
    key = sfs.put_bytes(b"abc").dataKey
    (sfs.root / key[-3:] / key / "manifest.json").write_text('{"size": 3}')
    with pytest.raises(CorruptData, match=key):
        sfs.read(key)


def test_absent_object(sfs: SfsRepository) -> None:
    with pytest.raises(NoSuchData):
        sfs.read("nosuchobject")
    assert sfs.size("nosuchobject") is None
    sfs.delete("nosuchobject")  # idempotent


@pytest.mark.parametrize("bad", ["../etc", "a/b", "..", "ab", "", "x" * 200, "a b c"])
def test_unsafe_keys_are_refused(sfs: SfsRepository, bad: str) -> None:
    with pytest.raises(RepositoryError):
        sfs.read(bad)
    with pytest.raises(RepositoryError):
        sfs.delete(bad)


def test_nothing_is_visible_before_commit_and_abort_leaves_nothing(sfs: SfsRepository) -> None:
    w = sfs.writer()
    w.write(payload(SMALL_CHUNK * 3 + 5))
    assert sfs.size(w.data_key) is None
    with pytest.raises(NoSuchData):
        sfs.read(w.data_key)
    assert list(sfs.keys()) == []
    w.abort()
    w.abort()  # idempotent
    assert files_under(sfs.root) == ["repository.json"]
    with pytest.raises(RepositoryError):
        w.write(b"more")
    with pytest.raises(RepositoryError):
        w.commit()


def test_context_manager_aborts_on_exception(sfs: SfsRepository) -> None:
    with pytest.raises(ZeroDivisionError), sfs.writer() as w:
        w.write(payload(SMALL_CHUNK * 2))
        1 / 0  # noqa: B018
    assert files_under(sfs.root) == ["repository.json"]


def test_delete(sfs: SfsRepository) -> None:
    keep = sfs.put_bytes(b"keep").dataKey
    gone = sfs.put_bytes(payload(3000)).dataKey
    sfs.delete(gone)
    sfs.delete(gone)
    assert sfs.size(gone) is None
    assert not (sfs.root / gone[-3:] / gone).exists()
    assert list(sfs.keys()) == [keep]


def test_locked_manifest_is_invisible(sfs: SfsRepository) -> None:
    key = sfs.put_bytes(b"payload").dataKey
    sfs.lock(key)
    assert sfs.size(key) is None
    with pytest.raises(NoSuchData, match="locked"):
        sfs.read(key)
    stat = sfs.stat(key)
    assert stat is not None and stat.locked and stat.size == 7
    assert list(sfs.keys()) == [key]  # still stored, for migration
    sfs.unlock(key)
    assert sfs.read_bytes(key) == b"payload"
    with pytest.raises(NoSuchData):
        sfs.lock("nosuchobject")


def test_writer_with_key_commits_locked(sfs: SfsRepository) -> None:
    with sfs.writer("migratedobject1", locked=True) as w:
        w.write(b"copied")
        w.commit()
    assert sfs.size("migratedobject1") is None
    sfs.unlock("migratedobject1")
    assert sfs.read_bytes("migratedobject1") == b"copied"
    with pytest.raises(RepositoryError, match="exists"):
        sfs.writer("migratedobject1")


def test_siphash_key_is_persisted(tmp_path: Path) -> None:
    first = SfsRepository("a", tmp_path, chunk_size=64)
    key = first.put_bytes(payload(300)).dataKey
    again = SfsRepository("a", tmp_path, chunk_size=128)
    assert again.siphash_key == first.siphash_key
    assert again.read_bytes(key) == payload(300)  # the manifest's own chunk size applies
    with pytest.raises(RepositoryError, match="siphash key"):
        SfsRepository(
            "a", tmp_path, siphash_key=bytes(16) if first.siphash_key != bytes(16) else b"1" * 16
        )
    configured = SfsRepository("b", tmp_path / "other", siphash_key=b"k" * 16)
    assert configured.siphash_key == b"k" * 16
    assert (
        json.loads((tmp_path / "other" / "repository.json").read_text())["siphashKey"]
        == (b"k" * 16).hex()
    )


def test_memoryview_of_wider_items(sfs: SfsRepository) -> None:
    import array

    ints = array.array("i", range(1000))
    with sfs.writer() as w:
        w.write(memoryview(ints))
        loc = w.commit()
    assert sfs.read_bytes(loc.dataKey) == ints.tobytes()


def test_no_temporary_files_remain(sfs: SfsRepository) -> None:
    key = sfs.put_bytes(payload(100)).dataKey
    sfs.lock(key)
    sfs.unlock(key)
    names = os.listdir(sfs.root / key[-3:] / key)
    assert sorted(names) == ["chunks", "manifest.json"]


def test_concurrent_writers_and_readers(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    repo = SfsRepository("busy", tmp_path, chunk_size=256)

    def roundtrip(i: int) -> bool:
        data = payload(i * 37 % 2000, seed=i)
        key = repo.put_bytes(data).dataKey
        return repo.read_bytes(key) == data and repo.size(key) == len(data)

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(roundtrip, range(64)))
    assert len(list(repo.keys())) == 64
