"""Offset expiry (offsets.retention, KIP-211): the rule, the durable Empty notes the offset
store keeps for it (across reopening and compaction), and the pass the broker runs, driven
against a real OffsetStore on disk and a real GroupCoordinator.

Commit times and Empty notes are wall-clock ms taken by the store, so each pass is given
an explicit `now_ms` relative to a reading of the clock around the event."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.groups import GroupCoordinator, GroupState
from crossbeat.broker.offset_expiry import expire_offsets, expired_offsets
from crossbeat.broker.offsets import FILE_NAME, CommittedOffset, OffsetStore

R = 60_000  # retention, ms


def now_ms() -> int:
    return int(time.time() * 1000)


async def settle(store: OffsetStore) -> None:
    """Wait until every line queued before this call is written and visible (the store
    writes in queue order, and a commit is answered only once its batch is applied)."""
    await store.commit("settle", [])


async def stable_member(c: GroupCoordinator, group: str = "g") -> str:
    """One member, joined and synced: `group` is Stable at generation 1."""
    joined = await c.join(group, "", None, "cli", "h", 6000, 5000, "consumer",
                          [("range", b"")], require_known_member=False)
    assert joined.error is ErrorCode.NONE
    await c.sync(group, joined.generation_id, joined.member_id, {joined.member_id: b"a"})
    assert c.groups[group].state is GroupState.STABLE
    return joined.member_id


def test_rule_counts_from_the_later_of_commit_and_empty() -> None:
    offsets = {("t", 0): CommittedOffset(1, -1, None, 1000),
               ("t", 1): CommittedOffset(2, -1, None, 5000)}
    # never noted Empty (standalone commits): each offset from its own commit
    assert expired_offsets(offsets, None, 1000 + R - 1, R) == []
    assert expired_offsets(offsets, None, 1000 + R, R) == [("t", 0)]
    # Empty since 3000: t0 (committed before) counts from 3000, t1 (committed after) from 5000
    assert expired_offsets(offsets, 3000, 3000 + R - 1, R) == []
    assert expired_offsets(offsets, 3000, 3000 + R, R) == [("t", 0)]
    assert expired_offsets(offsets, 3000, 5000 + R, R) == [("t", 0), ("t", 1)]


def test_standalone_commits_expire_durably_and_recommits_reset_the_clock(tmp_path: Path) -> None:
    async def run() -> None:
        store = await OffsetStore.open(tmp_path)
        c = GroupCoordinator()
        await store.commit("solo", [("t", 0, 5, -1, None), ("t", 1, 6, -1, None)])
        c0 = store.get("solo", "t", 0)
        assert c0 is not None
        assert (await expire_offsets(c, store, R, c0.commit_ms + R - 1)).expired == {}
        while now_ms() <= c0.commit_ms:  # the recommit must be a later ms (bounded: 1 ms)
            pass
        await store.commit("solo", [("t", 1, 7, -1, None)])  # t1 again: its clock restarts
        c1 = store.get("solo", "t", 1)
        assert c1 is not None and c1.commit_ms > c0.commit_ms
        result = await expire_offsets(c, store, R, c0.commit_ms + R)
        assert result.expired == {"solo": [("t", 0)]}
        assert store.get("solo", "t", 0) is None and store.get("solo", "t", 1) is not None
        assert (await expire_offsets(c, store, R, c1.commit_ms + R)).expired == {
            "solo": [("t", 1)]}
        assert "solo" not in store.groups()
        await store.close()
        reopened = await OffsetStore.open(tmp_path)
        assert reopened.groups() == [] and reopened.get("solo", "t", 1) is None
        await reopened.close()

    asyncio.run(run())


def test_stable_group_keeps_offsets_then_expires_from_when_it_emptied(tmp_path: Path) -> None:
    async def run() -> None:
        store = await OffsetStore.open(tmp_path)
        c = GroupCoordinator(on_members_change=store.note_members)
        member = await stable_member(c)
        await store.commit("g", [("t", 0, 9, -1, None)])
        await settle(store)
        assert store.has_members("g")
        # long past the commit's retention, but the group has a member: nothing expires
        far = now_ms() + 10 * R
        result = await expire_offsets(c, store, R, far)
        assert result.expired == {} and result.dead == []
        assert store.get("g", "t", 0) is not None and "g" in c.groups

        before = now_ms()
        assert c.leave("g", member) is ErrorCode.NONE  # Empty now: noted without waiting
        assert c.groups["g"].state is GroupState.EMPTY and store.has_pending("g")
        assert (await expire_offsets(c, store, R, far)).expired == {}  # note not written yet
        await settle(store)
        emptied = store.empty_since("g")
        assert emptied is not None and before <= emptied <= now_ms()
        assert (await expire_offsets(c, store, R, emptied + R - 1)).expired == {}
        result = await expire_offsets(c, store, R, emptied + R)
        assert result.expired == {"g": [("t", 0)]} and result.dead == ["g"]
        assert "g" not in c.groups and store.groups() == []
        await store.close()

    asyncio.run(run())


def test_empty_time_and_members_survive_reopen_and_compaction(tmp_path: Path) -> None:
    async def first() -> tuple[int, int]:
        store = await OffsetStore.open(tmp_path, compact_after=10)
        store.note_members("gone", True)
        await store.commit("gone", [("t", 0, 1, -1, None)])
        store.note_members("gone", False)
        await store.commit("live", [("t", 0, 2, -1, None)])
        store.note_members("live", True)  # still has members when the broker stops
        store.note_members("idle", True)  # members, never committed
        await settle(store)
        gone_since = store.empty_since("gone")
        assert gone_since is not None and store.has_members("live")
        for i in range(12):  # past compact_after: rewritten as a snapshot
            await store.commit("other", [("u", 0, i, -1, None)])
        await store.close()
        return gone_since, now_ms()

    gone_since, closed = asyncio.run(first())
    assert len((tmp_path / FILE_NAME).read_bytes().splitlines()) < 10  # compacted

    async def second() -> int:
        store = await OffsetStore.open(tmp_path)
        opened = now_ms()
        assert store.empty_since("gone") == gone_since
        # its members went with the broker that stopped: Empty since this open
        live_since = store.empty_since("live")
        assert live_since is not None and closed <= live_since <= opened
        assert not store.has_members("live") and not store.has_members("idle")
        assert sorted(store.groups()) == ["gone", "live", "other"]
        await store.close()
        return live_since

    live_since = asyncio.run(second())

    async def third() -> None:
        store = await OffsetStore.open(tmp_path)
        assert store.empty_since("live") == live_since  # a second restart keeps that time
        c = GroupCoordinator()
        result = await expire_offsets(c, store, R, live_since + R - 1)
        assert set(result.expired) == {"gone", "other"}  # committed before live's open
        assert store.groups() == ["live"]
        await store.close()

    asyncio.run(third())


def test_dead_groups_are_forgotten_unless_members_or_ids_are_on_their_way(tmp_path: Path) -> None:
    async def run() -> None:
        store = await OffsetStore.open(tmp_path)
        c = GroupCoordinator(on_members_change=store.note_members)
        await stable_member(c, "busy")
        left = await stable_member(c, "quiet")
        c.leave("quiet", left)  # Empty, never committed: Dead at the next pass
        waiting = await c.join("joining", "", None, "cli", "h", 6000, 5000, "consumer",
                               [("range", b"")], require_known_member=True)
        assert waiting.error is ErrorCode.MEMBER_ID_REQUIRED  # Empty, with a pending id
        await settle(store)
        result = await expire_offsets(c, store, R)
        assert result.dead == ["quiet"]
        assert set(c.groups) == {"busy", "joining"}
        assert not store.has_members("quiet")  # its record went with its Empty note
        await store.close()

    asyncio.run(run())


def test_coordinator_notes_leaving_and_reaching_empty() -> None:
    async def run() -> None:
        notes: list[tuple[str, bool]] = []
        c = GroupCoordinator(min_session_ms=1000,
                             on_members_change=lambda g, m: notes.append((g, m)))
        member = await stable_member(c)
        assert notes == [("g", True)]
        second = asyncio.create_task(c.join("g", "", None, "cli", "h", 6000, 5000, "consumer",
                                            [("range", b"")], require_known_member=False))
        await asyncio.sleep(0)  # a rebalance with members: no note
        c.leave("g", member)
        other = await second
        assert other.error is ErrorCode.NONE and notes == [("g", True)]
        c.leave("g", other.member_id)
        assert notes == [("g", True), ("g", False)]
        assert c.forget_if_empty("g") and "g" not in c.groups
        assert not c.forget_if_empty("g")

    asyncio.run(run())


def test_a_commit_in_flight_is_not_erased_by_expiry(tmp_path: Path) -> None:
    async def run() -> None:
        store = await OffsetStore.open(tmp_path)
        c = GroupCoordinator()
        await store.commit("solo", [("t", 0, 5, -1, None)])
        old = store.get("solo", "t", 0)
        assert old is not None
        fresh = asyncio.create_task(store.commit("solo", [("t", 0, 6, -1, None)]))
        await asyncio.sleep(0)  # the commit is queued, not yet written
        assert store.has_pending("solo")
        # the offset visible is due, but a tombstone now would be written after the commit
        assert (await expire_offsets(c, store, R, old.commit_ms + R)).expired == {}
        await fresh
        kept = store.get("solo", "t", 0)
        assert kept is not None and kept.offset == 6
        await store.close()

    asyncio.run(run())


def test_a_consumer_group_keeps_offsets_while_it_has_members(tmp_path: Path) -> None:
    """The same rule for a KIP-848 consumer group: members (noted durably) keep its offsets;
    once the last leaves they expire a retention later, and the group is then Dead."""
    from crossbeat.broker.groups.consumer_coordinator import Heartbeat

    async def run() -> None:
        store = await OffsetStore.open(tmp_path)
        c = GroupCoordinator(on_members_change=store.note_members)
        joined = c.consumer.heartbeat(Heartbeat("g", "m", 0, rebalance_timeout_ms=5000,
                                                subscribed_names=["t"]), {"t": 1})
        assert joined.error is ErrorCode.NONE
        await store.commit("g", [("t", 0, 9, -1, None)])
        await settle(store)
        assert store.has_members("g") and not c.is_empty("g")
        far = now_ms() + 10 * R
        assert (await expire_offsets(c, store, R, far)).expired == {}
        assert c.delete("g", has_offsets=True) is ErrorCode.NON_EMPTY_GROUP

        c.consumer.heartbeat(Heartbeat("g", "m", -1), {"t": 1})
        await settle(store)
        emptied = store.empty_since("g")
        assert emptied is not None and c.is_empty("g")
        assert (await expire_offsets(c, store, R, emptied + R - 1)).expired == {}
        result = await expire_offsets(c, store, R, emptied + R)
        assert result.expired == {"g": [("t", 0)]} and result.dead == ["g"]
        assert "g" not in c.consumer.groups
        await store.close()

    asyncio.run(run())
