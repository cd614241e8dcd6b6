"""The group coordinator's state machine, driven directly (no sockets), on a fake clock."""

from __future__ import annotations

import asyncio

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.groups import GroupCoordinator, GroupState
from tests.unit.broker.conftest import Clock


def coordinator(clock: Clock) -> GroupCoordinator:
    return GroupCoordinator(min_session_ms=1000, max_session_ms=60000, clock=clock)


async def join(c: GroupCoordinator, member: str = "", **kw: object):  # type: ignore[no-untyped-def]
    args = dict(group_id="g", member_id=member, group_instance_id=None, client_id="cli",
                client_host="h", session_timeout_ms=6000, rebalance_timeout_ms=5000,
                protocol_type="consumer", protocols=[("range", b"meta-" + member.encode())],
                require_known_member=True)
    args.update(kw)
    return await c.join(**args)  # type: ignore[arg-type]


def test_member_id_required_then_join_sync_heartbeat() -> None:
    async def run() -> None:
        clock = Clock()
        c = coordinator(clock)
        first = await join(c)
        assert first.error is ErrorCode.MEMBER_ID_REQUIRED and first.member_id
        unknown = await join(c, "nobody")
        assert unknown.error is ErrorCode.UNKNOWN_MEMBER_ID
        joined = await join(c, first.member_id)
        assert joined.error is ErrorCode.NONE and joined.generation_id == 1
        assert joined.leader == first.member_id and len(joined.members) == 1
        sync = await c.sync("g", 1, first.member_id, {first.member_id: b"assign"})
        assert (sync.error, sync.assignment) == (ErrorCode.NONE, b"assign")
        assert c.groups["g"].state is GroupState.STABLE
        assert c.heartbeat("g", 1, first.member_id) is ErrorCode.NONE
        assert c.heartbeat("g", 0, first.member_id) is ErrorCode.ILLEGAL_GENERATION
        assert c.check_commit("g", 0, first.member_id) is ErrorCode.ILLEGAL_GENERATION
        assert c.check_commit("g", 1, "stranger") is ErrorCode.UNKNOWN_MEMBER_ID
        assert c.check_commit("g", 1, first.member_id) is ErrorCode.NONE

    asyncio.run(run())


def test_second_member_triggers_rebalance_and_followers_wait_for_leader() -> None:
    async def run() -> None:
        clock = Clock()
        c = coordinator(clock)
        a = (await join(c)).member_id
        await join(c, a)
        await c.sync("g", 1, a, {a: b"all"})
        b = (await join(c)).member_id
        b_join = asyncio.create_task(join(c, b))
        await asyncio.sleep(0)
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        assert c.heartbeat("g", 1, a) is ErrorCode.REBALANCE_IN_PROGRESS
        # a's commit on revoke is stored (Kafka accepts commits while a rebalance prepares)
        assert c.check_commit("g", 1, a) is ErrorCode.NONE
        assert c.check_commit("g", 0, a) is ErrorCode.ILLEGAL_GENERATION
        a_join = await join(c, a)  # a rejoins: the rebalance completes
        b_result = await b_join
        # until the leader's SyncGroup, the new generation's commits wait (Kafka's answer)
        assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE
        assert c.check_commit("g", 2, a) is ErrorCode.REBALANCE_IN_PROGRESS
        assert c.heartbeat("g", 2, a) is ErrorCode.NONE
        assert a_join.generation_id == b_result.generation_id == 2
        assert a_join.leader == a and len(a_join.members) == 2 and b_result.members == []
        b_sync = asyncio.create_task(c.sync("g", 2, b, {}))
        await asyncio.sleep(0)
        assert not b_sync.done()  # waits for the leader
        await c.sync("g", 2, a, {a: b"p0", b: b"p1"})
        assert (await b_sync).assignment == b"p1"
        assert c.leave("g", b) is ErrorCode.NONE
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        assert (await join(c, a)).generation_id == 3

    asyncio.run(run())


def test_session_timeout_removes_silent_member_and_rebalance_timeout_drops_laggards() -> None:
    async def run() -> None:
        clock = Clock()
        c = coordinator(clock)
        a = (await join(c)).member_id
        await join(c, a)
        b = (await join(c)).member_id
        b_join = asyncio.create_task(join(c, b))
        await asyncio.sleep(0)
        # a never rejoins: after the rebalance timeout (5 s) it is dropped, b completes alone
        clock.now += 5.1
        c.sweep()
        result = await b_join
        assert result.error is ErrorCode.NONE and result.leader == b and len(result.members) == 1
        await c.sync("g", result.generation_id, b, {b: b"x"})
        clock.now += 6.1  # no heartbeat for longer than the session timeout
        c.sweep()
        group = c.groups["g"]
        assert group.members == {} and group.state is GroupState.EMPTY

    asyncio.run(run())


def test_inconsistent_protocols_and_bad_session_timeout() -> None:
    async def run() -> None:
        c = coordinator(Clock())
        a = (await join(c)).member_id
        task = asyncio.create_task(join(c, a))
        await asyncio.sleep(0)
        bad = await join(c, "", protocols=[("other", b"")], require_known_member=False)
        assert bad.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert (await join(c, "", session_timeout_ms=10)).error is ErrorCode.INVALID_SESSION_TIMEOUT
        assert (await task).error is ErrorCode.NONE

    asyncio.run(run())


A_PROTOCOLS = [("range", b""), ("roundrobin", b"")]


async def stable_static_pair(c: GroupCoordinator) -> tuple[str, str]:
    """Static members 'ia' (the leader, range or roundrobin) and 'ib' (range) in a Stable
    group at generation 2, using range."""
    # no MEMBER_ID_REQUIRED for a static member
    a = (await join(c, group_instance_id="ia", protocols=A_PROTOCOLS)).member_id
    await c.sync("g", 1, a, {a: b"all"}, "ia")
    b_task = asyncio.create_task(join(c, group_instance_id="ib"))
    await asyncio.sleep(0)
    a_join = await join(c, a, group_instance_id="ia", protocols=A_PROTOCOLS)
    b = (await b_task).member_id
    assert a_join.generation_id == 2 and a_join.leader == a
    b_sync = asyncio.create_task(c.sync("g", 2, b, {}, "ib"))
    await c.sync("g", 2, a, {a: b"pa", b: b"pb"}, "ia")
    assert (await b_sync).assignment == b"pb"
    return a, b


def test_static_member_rejoin_when_stable_keeps_generation_and_fences_old_id() -> None:
    async def run() -> None:
        c = coordinator(Clock())
        a, b = await stable_static_pair(c)
        rejoined = await join(c, group_instance_id="ia", protocols=A_PROTOCOLS)  # leader restarted
        new_a = rejoined.member_id
        assert rejoined.error is ErrorCode.NONE and new_a != a
        # same generation, no member list, and the old leader id so that it does not assign
        assert (rejoined.generation_id, rejoined.leader, rejoined.members) == (2, a, [])
        group = c.groups["g"]
        assert group.state is GroupState.STABLE and group.leader_id == new_a
        assert (await c.sync("g", 2, new_a, {}, "ia")).assignment == b"pa"
        assert c.heartbeat("g", 2, b, "ib") is ErrorCode.NONE  # b is not disturbed
        assert c.heartbeat("g", 2, a, "ia") is ErrorCode.FENCED_INSTANCE_ID
        assert (await c.sync("g", 2, a, {}, "ia")).error is ErrorCode.FENCED_INSTANCE_ID
        assert c.check_commit("g", 2, a, "ia") is ErrorCode.FENCED_INSTANCE_ID
        assert c.leave("g", a, "ia") is ErrorCode.FENCED_INSTANCE_ID
        old_join = await join(c, a, group_instance_id="ia", protocols=A_PROTOCOLS)
        assert old_join.error is ErrorCode.FENCED_INSTANCE_ID
        assert c.heartbeat("g", 2, a, "nobody") is ErrorCode.UNKNOWN_MEMBER_ID
        assert c.check_commit("g", 2, new_a, "ia") is ErrorCode.NONE
        assert group.state is GroupState.STABLE and group.generation == 2

    asyncio.run(run())


def test_static_member_rejoin_with_new_protocol_or_mid_sync_rebalances() -> None:
    async def run() -> None:
        c = coordinator(Clock())
        a, b = await stable_static_pair(c)
        changed = asyncio.create_task(
            join(c, group_instance_id="ib", protocols=[("roundrobin", b"")]))
        await asyncio.sleep(0)
        group = c.groups["g"]
        assert group.state is GroupState.PREPARING_REBALANCE
        a_join = await join(c, a, group_instance_id="ia", protocols=A_PROTOCOLS)
        b_join = await changed
        assert a_join.generation_id == b_join.generation_id == 3
        assert a_join.protocol_name == "roundrobin"
        # CompletingRebalance: the old id waiting in SyncGroup is fenced, a rebalance follows
        b_sync = asyncio.create_task(c.sync("g", 3, b_join.member_id, {}, "ib"))
        await asyncio.sleep(0)
        again = asyncio.create_task(join(c, group_instance_id="ib"))
        assert (await b_sync).error is ErrorCode.FENCED_INSTANCE_ID
        assert group.state is GroupState.PREPARING_REBALANCE
        await join(c, a, group_instance_id="ia", protocols=A_PROTOCOLS)
        assert (await again).generation_id == 4

    asyncio.run(run())


def test_leave_by_instance_id_removes_static_member_and_rebalances() -> None:
    async def run() -> None:
        c = coordinator(Clock())
        a, b = await stable_static_pair(c)
        assert c.leave("g", "", "nobody") is ErrorCode.UNKNOWN_MEMBER_ID
        assert c.leave("g", "", "ib") is ErrorCode.NONE
        group = c.groups["g"]
        assert list(group.members) == [a] and group.state is GroupState.PREPARING_REBALANCE
        assert (await join(c, a, group_instance_id="ia", protocols=A_PROTOCOLS)).generation_id == 3

    asyncio.run(run())
