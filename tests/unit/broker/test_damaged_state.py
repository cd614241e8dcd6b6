"""Broker state files damaged at rest (bit rot, a bad restore): a damaged line costs that
line alone, a lost producer-id file never lets ids be handed out twice, and a space reserve
that is not a file is reported, not trusted."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from crossbeat.broker.offsets import FILE_NAME, OffsetStore
from crossbeat.broker.producers import ID_BLOCK, ProducerIdAllocator
from crossbeat.broker.txn_log import FILE_NAME as TXN_FILE
from crossbeat.broker.txn_log import TxnLog
from crossbeat.stream.errors import StreamError
from crossbeat.stream.placement import PlacementDriver
from crossbeat.stream.reserve import SpaceReserve


def flip(path: Path, line: int) -> None:
    """Flip one byte in the middle of line `line` (from 1)."""
    lines = path.read_bytes().split(b"\n")
    damaged = bytearray(lines[line - 1])
    damaged[len(damaged) // 2] ^= 0x20
    lines[line - 1] = bytes(damaged)
    path.write_bytes(b"\n".join(lines))


def test_a_damaged_offsets_line_costs_that_line_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Everything after the first damaged line was cut: a group went back from 30 to 10 and
    the others lost their offsets."""

    async def write() -> None:
        store = await OffsetStore.open(tmp_path)
        for offset in (10, 20, 30):
            await store.commit("g", [("t", 0, offset, -1, None)])
        await store.commit("h", [("t", 0, 5, -1, None)])
        await store.close()

    asyncio.run(write())
    flip(tmp_path / FILE_NAME, 2)  # the commit of 20

    async def reopen() -> tuple[int | None, int | None]:
        store = await OffsetStore.open(tmp_path)
        try:
            g, h = store.get("g", "t", 0), store.get("h", "t", 0)
            await store.commit("g", [("t", 0, 40, -1, None)])  # appends after the others
            return (g.offset if g else None), (h.offset if h else None)
        finally:
            await store.close()

    with caplog.at_level(logging.ERROR, logger="crossbeat.broker.offsets"):
        assert asyncio.run(reopen()) == (30, 5)
    assert "skipped 1 damaged lines (numbers 2)" in caplog.text

    async def again() -> int | None:
        store = await OffsetStore.open(tmp_path)
        c = store.get("g", "t", 0)
        await store.close()
        return c.offset if c else None

    assert asyncio.run(again()) == 40


def test_a_damaged_transaction_line_costs_that_line_alone(tmp_path: Path) -> None:
    async def write() -> None:
        log = TxnLog(tmp_path)
        log.load()
        for tid in ("a", "b", "c"):
            await log.write({"tid": tid, "state": "Ongoing"})
        log.close()

    asyncio.run(write())
    flip(tmp_path / TXN_FILE, 1)
    log = TxnLog(tmp_path)
    try:
        assert sorted(log.load()) == ["b", "c"]
    finally:
        log.close()


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage"])
def test_a_lost_producer_id_file_never_hands_an_id_out_twice(tmp_path: Path, damage: str) -> None:
    """Read as 0, it gave a new producer an old one's id: its first batches were answered
    DUPLICATE_SEQUENCE_NUMBER, which clients take as delivered, and never stored."""
    first = asyncio.run(ProducerIdAllocator(tmp_path).allocate())
    assert first == 0
    (tmp_path / "streams").mkdir()
    (tmp_path / "streams" / "placement.json").write_text("{}")  # the broker holds data
    path = tmp_path / "producer_ids"
    if damage == "missing":
        path.unlink()
    else:
        path.write_text("" if damage == "empty" else "not a number")
    again = asyncio.run(ProducerIdAllocator(tmp_path).allocate())
    assert again > 10**12 * ID_BLOCK  # from the clock: above any id a counter reached


def test_a_fresh_broker_starts_producer_ids_at_zero(tmp_path: Path) -> None:
    assert asyncio.run(ProducerIdAllocator(tmp_path).allocate()) == 0


def test_a_space_reserve_that_is_not_a_file_is_not_trusted(tmp_path: Path) -> None:
    """A directory in its place counted as the reserve, and releasing it raised."""
    (tmp_path / "space.reserve").mkdir()
    reserve = SpaceReserve(tmp_path / "space.reserve", size=4096)
    assert reserve.make() is False
    assert reserve.release() is False
    assert (tmp_path / "space.reserve").is_dir()


def test_a_damaged_txn_state_is_forgotten_not_fatal(tmp_path: Path) -> None:
    (tmp_path / TXN_FILE).write_text(json.dumps({"tid": "x", "state": "Ongoing"}) + "\n")
    log = TxnLog(tmp_path)
    try:
        assert log.load() == {"x": {"tid": "x", "state": "Ongoing"}}  # decodable: the coordinator judges
    finally:
        log.close()


@pytest.mark.parametrize(("streams", "next_id", "why"), [
    ({"a": 1, "b": 1}, 3, "share id 1"),
    ({"a": 5}, 3, "not below next_id"),
    ({"a": None}, 3, "has no range"),
])
def test_an_inconsistent_placement_file_is_refused_naming_it(
    tmp_path: Path, streams: dict[str, int | None], next_id: int, why: str
) -> None:
    """Two streams with one id wrote into the same files; an id at or above next_id would be
    given to a new stream; no range was an IndexError traceback."""
    def stream(sid: int | None) -> dict[str, object]:
        ranges = [] if sid is None else [{"index": 0, "start": 0, "end": None, "sealed": False}]
        return {"id": sid or 1, "config": {}, "start_offset": 0, "ranges": ranges}

    path = tmp_path / "placement.json"
    path.write_text(json.dumps({"version": 1, "next_id": next_id,
                                "streams": {n: stream(i) for n, i in streams.items()}}))
    with pytest.raises(StreamError, match=f"placement file {path} is unreadable: .*{why}"):
        PlacementDriver(path)
