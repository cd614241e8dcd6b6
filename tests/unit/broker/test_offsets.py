"""Committed offsets are durable, survive reopening, and a torn tail is cut off."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.offsets import FILE_NAME, OffsetStore
from tests.support.smallfs import fill, small_filesystem


def test_commit_reopen_torn_tail_and_compaction(tmp_path: Path) -> None:
    async def first() -> None:
        store = await OffsetStore.open(tmp_path, compact_after=10)
        await asyncio.gather(
            store.commit("g1", [("t", 0, 5, 3, "meta"), ("t", 1, 7, -1, None)]),
            store.commit("g2", [("u", 0, 1, 0, "")]),
        )
        for i in range(12):  # past compact_after: the log is rewritten as a snapshot
            await store.commit("g1", [("t", 0, 10 + i, 4, "m")])
        await store.commit("g2", [("u", 0, None, -1, None)])  # tombstone
        await store.close()

    asyncio.run(first())
    log = tmp_path / FILE_NAME
    with log.open("ab") as fh:
        fh.write(b'0badc0de {"g": "g1", "o": [["t", 0, 999')  # torn, no newline

    async def second() -> None:
        store = await OffsetStore.open(tmp_path)
        c = store.get("g1", "t", 0)
        assert c is not None and (c.offset, c.leader_epoch, c.metadata) == (21, 4, "m")
        assert store.get("g1", "t", 1) is not None
        assert store.get("g2", "u", 0) is None and "g2" not in store.groups()
        await store.close()

    asyncio.run(second())
    assert log.read_bytes().endswith(b"\n")
    assert len(log.read_bytes().splitlines()) < 8  # compacted


def test_a_compaction_the_full_disk_refuses_waits_for_as_many_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Commits whose lines still fit in the log's last page go on while the disk is full,
    but the compaction they trigger cannot: it was tried again (and logged) at every commit;
    now after as many more lines as the compaction threshold."""
    (tmp_path / "mnt").mkdir()
    with small_filesystem(tmp_path / "mnt", 1) as mnt:

        async def run() -> None:
            store = await OffsetStore.open(mnt, compact_after=5)
            await store.commit("g", [("t", 0, 0, -1, None)])
            fill(mnt / "filler")
            for offset in range(1, 21):  # 20 small lines: room in the last page
                await store.commit("g", [("t", 0, offset, -1, None)])
            c = store.get("g", "t", 0)
            assert c is not None and c.offset == 20
            await store.close()

        with caplog.at_level(logging.ERROR, logger="crossbeat.broker.offsets"):
            asyncio.run(run())
    failures = [r for r in caplog.records if "compaction failed" in r.getMessage()]
    assert 1 <= len(failures) <= 3


def test_a_stable_group_is_kept_across_reopen_and_compaction_until_it_empties(tmp_path: Path) -> None:
    """The coordinator's Stable state of a classic group is kept (the last one), restored
    at open with fresh sessions, and forgotten when the group becomes Empty; a state that
    does not describe a group is skipped (its members join again)."""
    from crossbeat.broker.groups import GroupCoordinator
    from crossbeat.broker.groups.state import Group as ClassicGroup
    from crossbeat.broker.groups.state import GroupState, Member, stable_doc

    def stable(generation: int) -> dict[str, object]:
        group = ClassicGroup("g", GroupState.STABLE, generation, "consumer", "range", "m1")
        group.members["m1"] = Member("m1", None, "client", "/10.0.0.1", 10.0, 30.0, "consumer",
                                     [("range", b"\x00sub")], 0.0, b"\x00assigned")
        return stable_doc(group)

    async def first() -> None:
        store = await OffsetStore.open(tmp_path, compact_after=5)
        store.note_stable("g", stable(1))
        store.note_stable("g", stable(2))  # the last one counts
        store.note_stable("gone", stable(1))
        store.note_members("gone", False)
        store.note_stable("bad", {"generation": "x"})
        store.note_stable("bad848", {"kind": "consumer", "groupEpoch": 1})
        for i in range(8):  # past compact_after: rewritten as a snapshot
            await store.commit("g", [("t", 0, i, 0, None)])
        await store.close()

    asyncio.run(first())

    async def second() -> None:
        store = await OffsetStore.open(tmp_path)
        assert sorted(store.stable_groups()) == ["bad", "bad848", "g"] and store.has_members("g")
        coordinator = GroupCoordinator(clock=lambda: 100.0)
        assert coordinator.restore(store.stable_groups()) == ["bad", "bad848"]
        assert sorted(coordinator.groups) == ["g"] and not coordinator.consumer.groups
        group = coordinator.groups["g"]
        assert (group.state, group.generation, group.leader_id) == (GroupState.STABLE, 2, "m1")
        member = group.members["m1"]
        assert (member.assignment, member.protocols, member.last_seen) == (
            b"\x00assigned", [("range", b"\x00sub")], 100.0)
        assert coordinator.heartbeat("g", 2, "m1") is ErrorCode.NONE
        store.note_members("g", False)  # its members went: Empty
        await store.close()
        reopened = await OffsetStore.open(tmp_path)
        assert "g" not in reopened.stable_groups() and not reopened.has_members("g")
        await reopened.close()

    asyncio.run(second())


def test_a_kept_state_the_broker_cannot_restore_leaves_its_group_empty(tmp_path: Path) -> None:
    """A kept state the coordinator refuses (an edited log, say): the group is noted Empty at
    start, as one without a kept state is, so that its offsets can expire. It stayed "with
    members" for good (found by the review)."""
    from tests.unit.broker.conftest import LoopBroker

    data = tmp_path / "data"

    async def keep() -> None:
        store = await OffsetStore.open(data)
        store.note_stable("bad", {"generation": 1, "leader": "nobody", "members": []})
        await store.commit("bad", [("t", 0, 5, 0, None)])
        await store.close()

    asyncio.run(keep())
    LoopBroker(data).start().close()

    async def check() -> None:
        store = await OffsetStore.open(data)
        assert not store.has_members("bad") and store.empty_since("bad") is not None
        assert "bad" not in store.stable_groups()
        await store.close()

    asyncio.run(check())
