"""The transaction log keeps the last state per transactional id across reopen, cuts a torn
tail, and compacts."""

from __future__ import annotations

import asyncio
from pathlib import Path

from crossbeat.broker.txn_log import FILE_NAME, TxnLog


def test_last_state_wins_torn_tail_cut_and_compacted(tmp_path: Path) -> None:
    async def run() -> None:
        log = TxnLog(tmp_path, compact_after=3)
        assert log.load() == {}
        for state in ("Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "Ongoing"):
            await log.write({"tid": "a", "state": state})
        await log.write({"tid": "b", "state": "Empty"})
        log.close()

    asyncio.run(run())
    path = tmp_path / FILE_NAME
    assert len(path.read_bytes().splitlines()) <= 2 + 3  # compacted on the way
    with path.open("ab") as f:
        f.write(b'{"tid": "a", "sta')  # a crash mid-write
    log = TxnLog(tmp_path)
    assert log.load() == {"a": {"tid": "a", "state": "Ongoing"},
                          "b": {"tid": "b", "state": "Empty"}}
    log.close()
    assert len(path.read_bytes().splitlines()) == 2


def test_a_removed_id_stays_removed_and_compaction_drops_it(tmp_path: Path) -> None:
    async def run() -> None:
        log = TxnLog(tmp_path, compact_after=100)
        log.load()
        await log.write({"tid": "a", "state": "CompleteCommit"})
        await log.write({"tid": "b", "state": "Empty"})
        await log.remove("a")
        log.close()

    asyncio.run(run())
    path = tmp_path / FILE_NAME
    assert len(path.read_bytes().splitlines()) == 3  # the removal is a line of its own
    log = TxnLog(tmp_path)
    assert log.load() == {"b": {"tid": "b", "state": "Empty"}}
    log.close()
    [line] = path.read_bytes().splitlines()  # rewritten: one line, with its checksum
    assert line.endswith(b' {"tid":"b","state":"Empty"}')

    async def again() -> None:  # an id removed, then used afresh
        log = TxnLog(tmp_path)
        log.load()
        await log.remove("b")
        await log.write({"tid": "b", "state": "Ongoing"})
        log.close()

    asyncio.run(again())
    log = TxnLog(tmp_path)
    assert log.load() == {"b": {"tid": "b", "state": "Ongoing"}}
    log.close()


def test_lines_of_earlier_versions_without_a_checksum_are_read(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_bytes(b'{"tid":"old","state":"Empty"}\n')
    log = TxnLog(tmp_path)
    try:
        assert log.load() == {"old": {"tid": "old", "state": "Empty"}}
    finally:
        log.close()
