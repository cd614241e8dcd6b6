"""The transaction log on a full disk: compaction is optional, so a write whose compaction
the disk refuses still succeeds (its line is durable), and opening the log needs no free
space; a refused rewrite leaves no temporary file."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crossbeat.broker.txn_log import FILE_NAME, TxnLog
from tests.support.smallfs import fill, small_filesystem


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "mnt").mkdir()
    with small_filesystem(tmp_path / "mnt", 1) as mnt:
        yield mnt


def reopened(directory: Path) -> dict[str, Any]:
    log = TxnLog(directory)
    try:
        return log.load()
    finally:
        log.close()


def test_a_write_whose_compaction_the_disk_refuses_succeeds(
    small_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = small_fs / "data"

    async def run() -> None:
        log = TxnLog(directory, compact_after=2)
        log.load()
        for state in ("Empty", "Ongoing", "PrepareCommit"):
            await log.write({"tid": "a", "state": state})
        fill(small_fs / "filler")  # the log's last page still has room for a line
        await log.write({"tid": "a", "state": "CompleteCommit"})  # 4 lines, 1 id: compacts
        for state in ("Empty", "Ongoing") * 5:  # not tried again at each of these
            await log.write({"tid": "a", "state": state})
        await log.write({"tid": "a", "state": "CompleteCommit"})
        log.close()

    with caplog.at_level(logging.WARNING, logger="crossbeat.broker.txn_log"):
        asyncio.run(run())
    failures = [r for r in caplog.records if "compaction failed" in r.getMessage()]
    assert 1 <= len(failures) <= 5  # every 2 more lines (compact_after), not every line
    assert sorted(p.name for p in directory.iterdir()) == [FILE_NAME]  # no temporary file
    assert reopened(directory) == {"a": {"tid": "a", "state": "CompleteCommit"}}


def test_the_log_opens_on_a_full_disk(small_fs: Path) -> None:
    """Opening rewrote the file every time: on a full disk it failed (so did the broker's
    start), leaving transactions.tmp."""
    directory = small_fs / "data"

    async def run() -> None:
        log = TxnLog(directory)
        log.load()
        await log.write({"tid": "a", "state": "Ongoing"})
        await log.write({"tid": "a", "state": "PrepareCommit"})  # a superseded line
        await log.write({"tid": "b", "state": "Empty"})
        log.close()

    asyncio.run(run())
    with (directory / FILE_NAME).open("ab") as f:
        f.write(b'{"tid": "b", "sta')  # a crash mid-write
    (directory / "transactions.tmp").touch()  # left by a rewrite that failed
    fill(small_fs / "filler")

    expected = {"a": {"tid": "a", "state": "PrepareCommit"}, "b": {"tid": "b", "state": "Empty"}}
    assert reopened(directory) == expected
    assert sorted(p.name for p in directory.iterdir()) == [FILE_NAME]
    assert len((directory / FILE_NAME).read_bytes().splitlines()) == 3  # torn tail cut

    (small_fs / "filler").unlink()
    assert reopened(directory) == expected
    assert len((directory / FILE_NAME).read_bytes().splitlines()) == 2  # compacted now
