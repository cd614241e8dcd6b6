"""The KIP-848 consumer group coordinator driven directly on a fake clock: epochs, the
revoke-before-assign reconciliation, fencing, leaving, session expiry, static members, and
one kind of group per group id."""

from __future__ import annotations

import asyncio

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.groups import GroupCoordinator
from crossbeat.broker.groups.consumer_coordinator import Heartbeat, HeartbeatResult
from tests.unit.broker.conftest import Clock

TOPICS = {"t": 4}
ALL = frozenset(("t", p) for p in range(4))


def coordinator(clock: Clock) -> GroupCoordinator:
    return GroupCoordinator(clock=clock, consumer_session_timeout_ms=10000)


def hb(c: GroupCoordinator, member: str, epoch: int, owned: frozenset[tuple[str, int]] | None = None,
       **kw: object) -> HeartbeatResult:
    if epoch == 0:
        kw.setdefault("subscribed_names", ["t"])
        kw.setdefault("rebalance_timeout_ms", 5000)
        owned = owned or frozenset()
    result = c.consumer.heartbeat(Heartbeat("g", member, epoch, owned=owned, **kw), TOPICS)  # type: ignore[arg-type]
    group = c.consumer.groups.get("g")
    if group is not None:  # the invariant: nobody holds a partition another member holds
        held = [tp for m in group.members.values() for tp in m.assigned | m.revoking]
        assert len(held) == len(set(held)), held
    return result


def test_partitions_are_revoked_before_they_are_assigned() -> None:
    clock = Clock()
    c = coordinator(clock)
    a = hb(c, "A", 0)
    assert (a.error, a.member_epoch, a.assignment) == (ErrorCode.NONE, 1, ALL)
    b = hb(c, "B", 0)
    assert b.member_epoch == 2 and b.assignment == frozenset()  # all still held by A
    a = hb(c, "A", 1, owned=ALL)
    assert a.member_epoch == 1 and a.assignment is not None and len(a.assignment) == 2
    kept = a.assignment
    assert hb(c, "A", 1, owned=ALL).assignment is None  # not revoked yet: nothing new
    assert hb(c, "B", 2, owned=frozenset()).assignment is None  # still withheld
    a = hb(c, "A", 1, owned=kept)  # revocation acknowledged
    assert (a.member_epoch, a.assignment) == (2, kept)
    b = hb(c, "B", 2, owned=frozenset())
    assert (b.member_epoch, b.assignment) == (2, ALL - kept)
    assert c.consumer.groups["g"].state == "Stable"


def test_fencing_errors_and_commit_epochs() -> None:
    c = coordinator(Clock())
    hb(c, "A", 0)
    assert hb(c, "A", 7, owned=ALL).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert hb(c, "nobody", 1).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert hb(c, "", 0).error is ErrorCode.INVALID_REQUEST
    assert hb(c, "X", 0, server_assignor="sticky").error is ErrorCode.UNSUPPORTED_ASSIGNOR
    assert c.check_commit("g", 1, "A", version=9) is ErrorCode.NONE
    assert c.check_commit("g", 0, "A", version=9) is ErrorCode.STALE_MEMBER_EPOCH
    assert c.check_commit("g", 1, "A", version=8) is ErrorCode.UNSUPPORTED_VERSION
    assert c.check_commit("g", -1, "", version=9) is ErrorCode.UNKNOWN_MEMBER_ID  # not empty
    # a rejoin with a known id starts from nothing and gets its partitions back
    assert hb(c, "A", 0).assignment == ALL


def test_leave_and_session_timeout_free_partitions() -> None:
    clock = Clock()
    c = coordinator(clock)
    hb(c, "A", 0)
    hb(c, "B", 0)
    hb(c, "A", 1, owned=ALL)
    kept = c.consumer.groups["g"].members["A"].assigned
    hb(c, "A", 1, owned=kept)
    hb(c, "B", 2, owned=frozenset())
    assert hb(c, "B", -1).member_epoch == -1  # B leaves: A gets everything
    a = hb(c, "A", 2, owned=kept)
    assert (a.member_epoch, a.assignment) == (3, ALL)
    c_epoch = hb(c, "C", 0).member_epoch
    clock.now += 6
    hb(c, "C", c_epoch, owned=frozenset())
    clock.now += 6  # A is silent past the session timeout, C is not
    c.sweep()
    assert "A" not in c.consumer.groups["g"].members
    c_epoch = c.consumer.groups["g"].members["C"].member_epoch
    assert hb(c, "C", c_epoch, owned=frozenset()).assignment == ALL
    assert c.is_empty("g") is False
    assert c.delete("g", has_offsets=True) is ErrorCode.NON_EMPTY_GROUP


def test_static_member_restart_keeps_its_partitions() -> None:
    c = coordinator(Clock())
    hb(c, "A", 0, instance_id="i1")
    assert hb(c, "A2", 0, instance_id="i1").error is ErrorCode.UNRELEASED_INSTANCE_ID
    assert hb(c, "A", -2, instance_id="i1").member_epoch == -2
    back = hb(c, "A2", 0, instance_id="i1")
    assert (back.error, back.member_epoch, back.assignment) == (ErrorCode.NONE, 1, ALL)
    assert c.consumer.groups["g"].group_epoch == 1  # no rebalance
    assert hb(c, "A", 1, owned=ALL).error is ErrorCode.UNKNOWN_MEMBER_ID


def test_a_group_id_names_one_kind_of_group() -> None:
    async def run() -> None:
        c = coordinator(Clock())
        hb(c, "A", 0)
        joined = await c.join("g", "", None, "cli", "h", 6000, 5000, "consumer",
                              [("range", b"")], require_known_member=False)
        assert joined.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        hb(c, "A", -1)
        # empty: the classic join converts it
        joined = await c.join("g", "", None, "cli", "h", 6000, 5000, "consumer",
                              [("range", b"")], require_known_member=False)
        assert joined.error is ErrorCode.NONE and "g" not in c.consumer.groups
        assert hb(c, "B", 0).error is ErrorCode.GROUP_ID_NOT_FOUND

    asyncio.run(run())
