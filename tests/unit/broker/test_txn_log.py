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
