"""Small PUTs' group commit: staged objects share syncs and metadata transactions, and a
refused object leaves neither metadata nor data behind."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from crossbeat.metadata import Bucket
from crossbeat.metadata.errors import InvalidMetadata
from crossbeat.repositories import syncgroup
from crossbeat.repositories.errors import RepositoryError
from crossbeat.repositories.sfs import SfsRepository, SfsWriter
from crossbeat.s3.body import Checksums
from crossbeat.s3.datapath import Written
from crossbeat.s3.errors import S3Error
from crossbeat.s3.gateway import Gateway
from crossbeat.s3.settings import GatewaySettings
from tests.support.procs import wait_until as poll_until

pytestmark = pytest.mark.skipif(not syncgroup.available(), reason="syncfs(2) is Linux-only")


def open_gateway(tmp_path: Path, **settings: Any) -> Gateway:
    gateway = Gateway.open(GatewaySettings(data_dir=tmp_path / "data", workers=1, **settings), {})
    gateway.store.create_bucket(Bucket("b", "owner", "default", "2026-01-01T00:00:00.000Z"))
    return gateway


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gateway]:
    gateway = open_gateway(tmp_path)
    try:
        yield gateway
    finally:
        gateway.close()


def build_for(key: str) -> Any:
    def build(written: Written, bucket: Bucket | None) -> dict[str, Any]:
        if bucket is None:
            raise S3Error("NoSuchBucket")
        return {
            "bucket": bucket.name, "key": key, "versionId": "null", "isLatest": True,
            "isDeleteMarker": False, "size": written.size, "etag": written.md5_hex,
            "location": [written.location.to_json()],
        }  # fmt: skip

    return build


def checksums() -> Checksums:
    return Checksums(md5_hex="0" * 32, algorithm=None, value_b64=None)


async def put_many(gw: Gateway, bucket: str, n: int) -> list[Any]:
    repo = gw.repository("default")
    staged = [repo.small_writer(os.urandom(100 + i)) for i in range(n)]
    assert all(s is not None for s in staged)
    return await asyncio.gather(
        *(gw.put_batcher.put(s, checksums(), bucket, build_for(f"k{i}")) for i, s in enumerate(staged) if s),
        return_exceptions=True,
    )


def test_a_burst_of_puts_shares_syncs_and_transactions(gw: Gateway) -> None:
    results = asyncio.run(put_many(gw, "b", 50))
    repo = gw.repository("default")
    assert isinstance(repo, SfsRepository) and repo._sync_group is not None
    for i, (written, meta) in enumerate(results):
        stored = gw.store.get_version("b", f"k{i}", None)
        assert stored is not None and stored["location"] == meta["location"]
        assert len(repo.read_bytes(written.location.dataKey)) == 100 + i
    # staged before the first round began, all fifty ride on very few syncs and commits
    assert repo._sync_group.rounds < 10
    assert gw.put_batcher.batches < 10


def test_a_refused_version_leaves_no_data(gw: Gateway) -> None:
    results = asyncio.run(put_many(gw, "missing", 3))
    assert all(isinstance(r, S3Error) and r.code == "NoSuchBucket" for r in results)
    # the data goes on a worker thread, after the answer: poll, with a bound
    deadline = time.monotonic() + 10
    while list(gw.repository("default").keys()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert list(gw.repository("default").keys()) == []


def test_an_overwrite_frees_the_displaced_data(gw: Gateway) -> None:
    first = asyncio.run(put_many(gw, "b", 1))[0]
    second = asyncio.run(put_many(gw, "b", 1))[0]  # the same key: the null version again
    repo = gw.repository("default")
    old, new = first[0].location.dataKey, second[0].location.dataKey
    deadline = time.monotonic() + 10
    while old in set(repo.keys()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert set(repo.keys()) == {new}
    stored = gw.store.get_version("b", "k0", None)
    assert stored is not None and stored["location"] == second[1]["location"]


def test_one_version_the_store_refuses_leaves_the_rest_of_its_group_stored(gw: Gateway) -> None:
    def refused(written: Written, bucket: Bucket | None) -> dict[str, Any]:
        return {**build_for("m3")(written, bucket), "key": ""}  # InvalidMetadata in the store

    async def group() -> list[Any]:
        repo = gw.repository("default")
        staged = [repo.small_writer(os.urandom(64)) for _ in range(6)]
        builds = [build_for(f"m{i}") if i != 3 else refused for i in range(6)]
        return await asyncio.gather(
            *(gw.put_batcher.put(s, checksums(), "b", f) for s, f in zip(staged, builds, strict=True) if s),
            return_exceptions=True,
        )

    before = gw.store.last_seq()
    results = asyncio.run(group())
    assert [isinstance(r, InvalidMetadata) for r in results] == [False, False, False, True, False, False]
    for i in (0, 1, 2, 4, 5):
        assert gw.store.get_version("b", f"m{i}", None) is not None
    # one journal entry per stored version, seqs dense: the refused one took none
    entries = gw.store.read_journal(before, 100)
    assert sorted(e.key for e in entries) == ["m0", "m1", "m2", "m4", "m5"]
    assert [e.seq for e in entries] == list(range(before + 1, before + 6))


def test_a_put_whose_files_cannot_be_written_fails_alone(gw: Gateway) -> None:
    """The sync thread writes the files: one that fails answers its own request with the
    error and leaves nothing behind; the others in its group are stored."""
    repo = gw.repository("default")
    assert isinstance(repo, SfsRepository)

    async def group() -> list[Any]:
        def writer() -> SfsWriter:
            return cast(SfsWriter, repo.small_writer(os.urandom(64)))

        staged = [writer() for _ in range(4)]
        bad = staged[2]
        for i in (0, 1, 3):  # not in the bad one's fan-out directory (nothing is written yet)
            while staged[i].data_key[-3:] == bad.data_key[-3:]:
                staged[i] = writer()
        (repo.root / bad.data_key[-3:]).write_bytes(b"a file where its directory goes")
        return await asyncio.gather(
            *(gw.put_batcher.put(s, checksums(), "b", build_for(f"f{i}")) for i, s in enumerate(staged)),
            return_exceptions=True,
        )

    results = asyncio.run(group())
    assert [isinstance(r, RepositoryError) for r in results] == [False, False, True, False]
    assert "Not a directory" in str(results[2])
    for i in (0, 1, 3):
        assert gw.store.get_version("b", f"f{i}", None) is not None
    assert gw.store.get_version("b", "f2", None) is None
    assert sorted(repo.keys()) == sorted(r[0].location.dataKey for i, r in enumerate(results) if i != 2)


def test_a_closed_batcher_refuses_and_writes_nothing(gw: Gateway) -> None:
    gw.put_batcher.close()
    results = asyncio.run(put_many(gw, "b", 1))
    assert isinstance(results[0], S3Error) and results[0].status == 503
    assert list(gw.repository("default").keys()) == []


async def wait_until(cond: Any, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)  # the loop goes on meanwhile


def groups_while_the_store_is_held(
    gw: Gateway, n: int, *, one_by_one: bool = False, files_first: bool = False
) -> int:
    """PUT one object, hold the metadata writer so that its group cannot commit, PUT `n`
    more (each handed to the sync thread in a loop iteration of its own), release the
    writer; return how many groups the batcher committed. The PUTs count as requests in
    flight, as the gateway's request handler counts them. `one_by_one`: each PUT only once
    the one before was handed to the store in a round of its own. `files_first`: wait
    until every object's files are written before releasing the writer."""
    entered, release = threading.Event(), threading.Event()

    def hold(_txn: Any) -> None:
        entered.set()
        release.wait(30)

    async def run() -> list[Any]:
        repo = gw.repository("default")
        gw.store._writer.submit_nowait(hold, lambda ok, value: None)  # type: ignore[attr-defined]
        await wait_until(entered.is_set, "the writer to be held")
        first = repo.small_writer(b"first")
        assert first is not None
        puts = [asyncio.ensure_future(gw.put_batcher.put(first, checksums(), "b", build_for("first")))]
        await wait_until(lambda: gw.put_batcher._in_store == 1, "the first group to reach the store")
        for i in range(n):
            staged = repo.small_writer(os.urandom(50))
            assert staged is not None
            puts.append(asyncio.ensure_future(gw.put_batcher.put(staged, checksums(), "b", build_for(f"k{i}"))))
            await asyncio.sleep(0)  # a loop iteration each: one hand-over each
            if one_by_one:
                # Handed to the store, not merely taken off the queue: taken, it may still
                # be staging its files when the next PUT arrives, and then joins its round
                # (that happened when the filesystem was slow after other tests' deletes).
                # Rounds that wait for the previous commit never get here: the wait fails.
                await wait_until(
                    lambda i=i: gw.put_batcher._in_store == i + 2,
                    "the sync thread to hand the PUT to the store in a round of its own",
                )
        await wait_until(lambda: not gw.put_batcher._staged, "the last hand-over")
        if files_first:
            # (bound under the 5 s after which a sync thread might stop waiting regardless)
            await wait_until(lambda: len(list(repo.keys())) == n + 1, "the files of every PUT", 3)
        release.set()
        return await asyncio.gather(*puts)

    gw.requests_in_flight += n + 1
    try:
        results = asyncio.run(run())
    finally:
        gw.requests_in_flight -= n + 1
    assert len(results) == n + 1
    for i in range(n):
        assert gw.store.get_version("b", f"k{i}", None) is not None
    return gw.put_batcher.batches


def test_under_load_what_stages_during_a_commit_shares_the_next_round(tmp_path: Path) -> None:
    gw = open_gateway(tmp_path, put_group_busy_requests=5)
    try:
        # the first object's group, then one group for all twenty that arrived while it
        # committed, whose files the sync thread wrote meanwhile
        assert groups_while_the_store_is_held(gw, 20, files_first=True) == 2
    finally:
        gw.close()


def test_below_the_busy_mark_rounds_do_not_wait_for_the_previous_commit(tmp_path: Path) -> None:
    gw = open_gateway(tmp_path, put_group_busy_requests=22)
    try:
        # each PUT gets a round of its own while the first group is still held
        assert groups_while_the_store_is_held(gw, 20, one_by_one=True) == 21
    finally:
        gw.close()


def test_the_gateway_counts_the_requests_it_is_handling(gw: Gateway) -> None:
    async def run() -> list[Any]:
        release = asyncio.Event()
        sent: list[Any] = []

        async def receive() -> dict[str, Any]:
            await release.wait()  # the body arrives only when the test says so
            return {"type": "http.request", "body": b"hello", "more_body": False}

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {
            "type": "http", "method": "PUT", "path": "/b/k", "raw_path": b"/b/k", "query_string": b"",
            "headers": [(b"host", b"localhost"), (b"content-length", b"5")], "http_version": "1.1",
            "scheme": "http", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 5), "root_path": "",
        }  # fmt: skip
        assert gw.requests_in_flight == 0
        request = asyncio.ensure_future(gw(scope, receive, send))  # anonymous: refused, then its body drained
        await wait_until(lambda: gw.requests_in_flight == 1, "the request to be counted")
        release.set()
        await request
        assert gw.requests_in_flight == 0
        return sent

    sent = asyncio.run(run())
    assert sent[0]["status"] == 403


def test_small_puts_take_directories_made_ahead_and_close_stops_the_helper(tmp_path: Path) -> None:
    gateway = open_gateway(tmp_path)
    repo = gateway.repository("default")
    assert isinstance(repo, SfsRepository) and repo._prepared is not None  # on by default
    prepared = repo._prepared
    try:
        results: list[Any] = []

        def some_taken() -> bool:
            results[:] = asyncio.run(put_many(gateway, "b", 8))  # k0..k7 again: the last stand
            return prepared.taken > 0

        poll_until(some_taken, what="a small PUT in prepared directories")
        for written, meta in results:
            assert meta["location"] == [written.location.to_json()]
            assert len(repo.read_bytes(written.location.dataKey)) == written.size
        assert prepared._proc is not None
        helper = prepared._proc
    finally:
        gateway.close()
    assert helper.returncode is not None  # stopped and reaped with the gateway
