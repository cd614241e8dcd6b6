"""The rebalance transitions of one group, shared by every request and by the sweep:
start a rebalance, complete its join phase (a new generation, or Empty), remove a member
and rebalance what is left. Each runs without awaiting and answers the long polls it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.groups.state import Group, GroupState, JoinResult, Member, SyncResult

log = logging.getLogger(__name__)


MembersListener = Callable[[str, bool], None]
"""Told (group id, True) when a group leaves Empty and (group id, False) when it becomes
Empty again; called in the middle of the transition, so it must not call back into us."""


def _ignore(group_id: str, has_members: bool) -> None:
    pass


class Rebalancer:
    """Moves groups between states on the coordinator's clock."""

    def __init__(self, clock: Callable[[], float], initial_delay: float,
                 on_members_change: MembersListener | None = None) -> None:
        self._clock = clock
        self._initial_delay = initial_delay  # seconds
        self._on_members_change = on_members_change or _ignore

    def prepare(self, group: Group, reason: str) -> None:
        """Enter PreparingRebalance: sync waiters get REBALANCE_IN_PROGRESS; the join phase
        ends by the largest rebalance timeout (not before the initial delay, from Empty)."""
        now = self._clock()
        if group.state is GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                if m.awaiting_sync:
                    assert m.sync_waiter is not None
                    m.sync_waiter.set_result(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        timeout = max((m.rebalance_timeout for m in group.members.values()), default=0.0)
        was_empty = group.state is GroupState.EMPTY
        if was_empty and self._initial_delay > 0:
            group.join_not_before = now + min(self._initial_delay, timeout)
        group.state = GroupState.PREPARING_REBALANCE
        group.join_deadline = now + timeout
        group.sync_deadline = None
        log.info("group %s: rebalancing (generation %d): %s", group.group_id, group.generation, reason)
        if was_empty:
            self._on_members_change(group.group_id, True)

    def maybe_complete_join(self, group: Group) -> None:
        """Complete the join phase if every member (and no pending id) is waiting in JoinGroup."""
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if self._clock() < group.join_not_before:
            return
        if group.pending or not all(m.awaiting_join for m in group.members.values()):
            return
        self.complete_join(group)

    def complete_join(self, group: Group) -> None:
        """End the join phase: members not waiting in JoinGroup are removed, the generation
        bumped; the group becomes Empty, or CompletingRebalance with every JoinGroup answered."""
        for m in list(group.members.values()):
            if not m.awaiting_join:
                self.remove_member(group, m, None, "did not rejoin in time")
        group.join_deadline = None
        group.generation += 1
        if not group.members:
            group.state = GroupState.EMPTY
            # the protocol type stays, as in Kafka: an emptied consumer group is still one
            # (ListGroups / DescribeGroups report it; the next member may bring another)
            group.protocol_name = group.leader_id = None
            log.info("group %s: empty at generation %d", group.group_id, group.generation)
            self._on_members_change(group.group_id, False)
            return
        members = list(group.members.values())
        group.protocol_type = members[0].protocol_type
        group.protocol_name = select_protocol(members)
        if group.leader_id not in group.members:
            group.leader_id = members[0].member_id
        group.state = GroupState.COMPLETING_REBALANCE
        now = self._clock()
        group.sync_deadline = now + max(m.rebalance_timeout for m in members)
        for m in members:
            m.last_seen = now
            m.assignment = b""
            result = join_result(group, m)
            assert m.join_waiter is not None
            m.join_waiter.set_result(result)
        log.info("group %s: generation %d with %d member(s), leader %s, protocol %s",
                 group.group_id, group.generation, len(members), group.leader_id,
                 group.protocol_name)

    def remove_member(self, group: Group, member: Member, error: ErrorCode | None,
                      why: str) -> None:
        """Drop `member`, answering its waiting JoinGroup/SyncGroup with `error`
        (UNKNOWN_MEMBER_ID if None); the caller rebalances (`after_removal`)."""
        group.members.pop(member.member_id, None)
        if member.awaiting_join and member.join_waiter is not None:
            member.join_waiter.set_result(JoinResult(error or ErrorCode.UNKNOWN_MEMBER_ID,
                                                     member.member_id))
        if member.awaiting_sync and member.sync_waiter is not None:
            member.sync_waiter.set_result(SyncResult(error or ErrorCode.UNKNOWN_MEMBER_ID))
        if group.leader_id == member.member_id:
            group.leader_id = None
        log.info("group %s: removed member %s (%s)", group.group_id, member.member_id, why)

    def after_removal(self, group: Group, reason: str) -> None:
        """Rebalance the members left after removals (to Empty if none is)."""
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            if group.members:
                self.prepare(group, reason)
            else:
                group.state = GroupState.PREPARING_REBALANCE
                self.complete_join(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            if not group.members and not group.pending:
                self.complete_join(group)
            else:
                self.maybe_complete_join(group)


def join_result(group: Group, member: Member) -> JoinResult:
    """`member`'s JoinGroup answer for the current generation (the leader gets every
    member's metadata for the chosen protocol)."""
    members = []
    if member.member_id == group.leader_id:
        members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name or ""))
                   for m in group.members.values()]
    return JoinResult(ErrorCode.NONE, member.member_id, group.generation, group.protocol_type,
                      group.protocol_name, group.leader_id or "", members)


def select_protocol(members: list[Member]) -> str:
    """The protocol every member supports that most members list first."""
    common = [name for name, _ in members[0].protocols]
    for m in members[1:]:
        names = {name for name, _ in m.protocols}
        common = [n for n in common if n in names]
    votes = {name: 0 for name in common}
    for m in members:
        for name, _ in m.protocols:
            if name in votes:
                votes[name] += 1
                break
    return max(common, key=lambda n: votes[n])  # ties: first in the first member's order
