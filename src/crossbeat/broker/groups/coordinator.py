"""`GroupCoordinator`: the entry points of JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DeleteGroups and OffsetCommit's fencing, and the sweep that enforces their deadlines.

It also holds the KIP-848 consumer groups (`consumer`, see consumer_coordinator.py): a group
id names one kind of group, and the questions asked of every group (is it empty, may it be
deleted or forgotten, may this commit be applied) are answered here for both kinds."""

from __future__ import annotations

import asyncio
import binascii
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.groups.consumer_coordinator import ConsumerGroupCoordinator
from crossbeat.broker.groups.rebalance import (
    MembersListener,
    Rebalancer,
    join_result,
    select_protocol,
)
from crossbeat.broker.groups.state import (
    Group,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
    fenced,
    restored_group,
    stable_doc,
    static_member,
)

log = logging.getLogger(__name__)

SWEEP_INTERVAL = 0.1

StableListener = Callable[[str, dict[str, Any]], None]
"""Told (group id, `state.stable_doc`) when a classic group becomes Stable; must not call
back into the coordinator."""


def _ignore_stable(group_id: str, doc: dict[str, Any]) -> None:
    pass


class GroupCoordinator:
    """All consumer groups of this broker (it is the coordinator of every group).

    `on_members_change(group_id, has_members)` is told when a group (of either kind) leaves
    Empty (True) and becomes Empty again (False): the offset store notes it, offset expiry
    counts from it. `on_stable(group_id, doc)` is told each time a classic group becomes
    Stable (a leader's SyncGroup; a static member's rejoin under a new member id), with
    `state.stable_doc`: the offset store keeps the last one until the group becomes Empty,
    and `restore` takes them back at start, so that a broker restart costs the members no
    rebalance, and an exactly-once application's TxnOffsetCommit with its member id and
    generation is still accepted (as Kafka's coordinator loads its group metadata records).
    A KIP-848 group's state (epochs, members, target and current assignments) is handed to
    `on_stable` likewise whenever it changes (`consumer_group.group_doc`), and restored the
    same way. `groups` holds the classic groups, `consumer.groups` the KIP-848 ones.
    """

    def __init__(self, *, min_session_ms: int = 1000, max_session_ms: int = 1800000,
                 initial_rebalance_delay_ms: int = 0,
                 consumer_heartbeat_interval_ms: int = 5000,
                 consumer_session_timeout_ms: int = 45000,
                 clock: Callable[[], float] = time.monotonic,
                 on_members_change: MembersListener | None = None,
                 on_stable: StableListener | None = None) -> None:
        self._on_stable = on_stable or _ignore_stable
        self._min_session = min_session_ms
        self._max_session = max_session_ms
        self._clock = clock
        self._rebalance = Rebalancer(clock, initial_rebalance_delay_ms / 1000, on_members_change)
        self.groups: dict[str, Group] = {}
        self.consumer = ConsumerGroupCoordinator(
            heartbeat_interval_ms=consumer_heartbeat_interval_ms,
            session_timeout_ms=consumer_session_timeout_ms, clock=clock, classic=self.groups,
            on_members_change=on_members_change or (lambda group_id, has_members: None),
            on_state=self._on_stable)

    def restore(self, docs: dict[str, dict[str, Any]]) -> list[str]:
        """Take back the Stable groups the offset store kept (`on_stable`'s documents),
        before any request is served. A document that does not describe one is logged and
        skipped: its members join again, as they would have. Returns the skipped groups'
        ids: the caller notes them Empty (else their offsets would never expire)."""
        now = self._clock()
        rejected: list[str] = []
        for group_id, doc in docs.items():
            try:
                if doc.get("kind") == "consumer":
                    self.consumer.restore(group_id, doc)
                    log.info("group %s: restored consumer group at epoch %d with %d member(s)",
                             group_id, self.consumer.groups[group_id].group_epoch,
                             len(self.consumer.groups[group_id].members))
                    continue
                self.groups[group_id] = restored_group(group_id, doc, now)
            except (KeyError, TypeError, ValueError, binascii.Error) as exc:
                log.warning("group %s: its kept state is unusable (%s): its members join again",
                            group_id, exc)
                rejected.append(group_id)
                continue
            log.info("group %s: restored stable at generation %d with %d member(s)", group_id,
                     self.groups[group_id].generation, len(self.groups[group_id].members))
        return rejected

    # -- JoinGroup ---------------------------------------------------------------------------
    async def join(self, group_id: str, member_id: str, group_instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member: bool) -> JoinResult:
        """Handle one JoinGroup; waits until the rebalance completes (or fails fast)."""
        if not group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, member_id)
        if not self._min_session <= session_timeout_ms <= self._max_session:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms  # v0 has no rebalance timeout
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            # Kafka without classic-to-consumer migration: a live consumer group refuses
            # classic members; an empty one becomes a classic group
            if consumer_group.members:
                return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
            del self.consumer.groups[group_id]
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        static = static_member(group, group_instance_id)
        # a static member's previous incarnation is about to be replaced: not a peer to agree with
        peer_of = static.member_id if static is not None and member_id == "" else member_id
        if not protocols or not protocol_type or not self._compatible(group, protocol_type, protocols, peer_of):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        now = self._clock()

        if member_id == "" and static is not None:
            return await self._rejoin_static(group, static, client_id, client_host,
                                             session_timeout_ms, rebalance_timeout_ms, protocols)
        if member_id == "" and require_known_member and group_instance_id is None:
            new_id = f"{client_id}-{uuid.uuid4()}"
            group.pending[new_id] = now + session_timeout_ms / 1000
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id)
        if member_id == "":
            member_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
        elif member_id in group.pending:
            del group.pending[member_id]
        elif (error := fenced(group, member_id, group_instance_id)) is not None:
            return JoinResult(error, member_id)

        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, group_instance_id, client_id, client_host,
                            session_timeout_ms / 1000, rebalance_timeout_ms / 1000,
                            protocol_type, protocols, now)
            group.members[member_id] = member
        else:
            member.last_seen = now
            unchanged = member.protocols == protocols
            if unchanged and group.state is GroupState.STABLE and member_id != group.leader_id:
                return join_result(group, member)
            if unchanged and group.state is GroupState.COMPLETING_REBALANCE:
                return join_result(group, member)
            member.protocols = protocols
            member.session_timeout = session_timeout_ms / 1000
            member.rebalance_timeout = rebalance_timeout_ms / 1000
            if member.awaiting_join:
                assert member.join_waiter is not None
                member.join_waiter.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        return await self._await_rebalance(group, member, f"member {member_id} joined")

    async def _await_rebalance(self, group: Group, member: Member, reason: str) -> JoinResult:
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_waiter = waiter
        if group.state is not GroupState.PREPARING_REBALANCE:
            self._rebalance.prepare(group, reason)
        self._rebalance.maybe_complete_join(group)
        return await waiter

    async def _rejoin_static(self, group: Group, member: Member, client_id: str,
                             client_host: str, session_timeout_ms: int,
                             rebalance_timeout_ms: int,
                             protocols: list[tuple[str, bytes]]) -> JoinResult:
        """A static member joined with no member id while its instance is a member.

        As Kafka's updateStaticMemberAndRebalance: the member gets a fresh id and keeps its
        assignment; its old id is fenced (a JoinGroup or SyncGroup it is waiting in answers
        FENCED_INSTANCE_ID). A Stable group whose protocol choice stays is not rebalanced.
        """
        old_id, leader = member.member_id, group.leader_id
        new_id = f"{member.group_instance_id}-{uuid.uuid4()}"
        del group.members[old_id]
        if member.awaiting_join and member.join_waiter is not None:
            member.join_waiter.set_result(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        if member.awaiting_sync and member.sync_waiter is not None:
            member.sync_waiter.set_result(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_id
        group.members[new_id] = member
        if leader == old_id:
            group.leader_id = new_id
        member.client_id, member.client_host = client_id, client_host
        member.protocols = protocols
        member.session_timeout = session_timeout_ms / 1000
        member.rebalance_timeout = rebalance_timeout_ms / 1000
        member.last_seen = self._clock()
        log.info("group %s: static member %s replaced %s", group.group_id,
                 member.group_instance_id, old_id)
        if (group.state is GroupState.STABLE
                and select_protocol(list(group.members.values())) == group.protocol_name):
            # the previous leader id, even if that was this member: a leader would assign
            # again, and a Stable group does not hand out a new assignment
            self._on_stable(group.group_id, stable_doc(group))
            return JoinResult(ErrorCode.NONE, new_id, group.generation, group.protocol_type,
                              group.protocol_name, leader or "", [])
        # CompletingRebalance: the leader may be assigning to the old id, so rebalance again
        return await self._await_rebalance(
            group, member, f"static member {member.group_instance_id} rejoined as {new_id}")

    def _compatible(self, group: Group, protocol_type: str, protocols: list[tuple[str, bytes]],
                    member_id: str) -> bool:
        others = [m for mid, m in group.members.items() if mid != member_id]
        if not others:
            return True
        if group.protocol_type is not None and protocol_type != group.protocol_type:
            return False
        common = {name for name, _ in protocols}
        for m in others:
            common &= {name for name, _ in m.protocols}
        return bool(common)

    # -- SyncGroup ---------------------------------------------------------------------------
    async def sync(self, group_id: str, generation_id: int, member_id: str,
                   assignments: dict[str, bytes],
                   group_instance_id: str | None = None) -> SyncResult:
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if (error := fenced(group, member_id, group_instance_id)) is not None:
            return SyncResult(error)
        member = group.members[member_id]
        if generation_id != group.generation:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        member.last_seen = self._clock()
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state is GroupState.STABLE:
            return SyncResult(ErrorCode.NONE, member.assignment, group.protocol_type,
                              group.protocol_name)
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if member_id == group.leader_id:
            for mid, m in group.members.items():
                m.assignment = assignments.get(mid, b"")
            group.state = GroupState.STABLE
            group.sync_deadline = None
            for m in group.members.values():
                if m.awaiting_sync:
                    assert m.sync_waiter is not None
                    m.sync_waiter.set_result(SyncResult(ErrorCode.NONE, m.assignment,
                                                        group.protocol_type, group.protocol_name))
            log.info("group %s: stable at generation %d", group_id, group.generation)
            self._on_stable(group_id, stable_doc(group))
            return SyncResult(ErrorCode.NONE, member.assignment, group.protocol_type,
                              group.protocol_name)
        if member.awaiting_sync:
            assert member.sync_waiter is not None
            member.sync_waiter.set_result(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.sync_waiter = waiter
        return await waiter

    # -- Heartbeat, LeaveGroup, commit fencing -------------------------------------------
    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None = None) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if (error := fenced(group, member_id, group_instance_id)) is not None:
            return error
        member = group.members[member_id]
        member.last_seen = self._clock()
        if generation_id != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, group_id: str, member_id: str,
              group_instance_id: str | None = None) -> ErrorCode:
        """Remove one member (a rebalance follows), as Kafka's LeaveGroup does.

        With an empty member id the static member `group_instance_id` is removed (the
        administrative removal of LeaveGroup v3+); with both, they must still belong together
        (else FENCED_INSTANCE_ID). A pending member id (MEMBER_ID_REQUIRED, not yet joined)
        is simply forgotten.
        """
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not member_id:
            static = static_member(group, group_instance_id)
            if static is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            member_id = static.member_id
        elif member_id in group.pending:
            del group.pending[member_id]
            self._rebalance.maybe_complete_join(group)
            return ErrorCode.NONE
        elif (error := fenced(group, member_id, group_instance_id)) is not None:
            return error
        member = group.members[member_id]
        self._rebalance.remove_member(group, member, ErrorCode.UNKNOWN_MEMBER_ID, "left the group")
        self._rebalance.after_removal(group, f"member {member_id} left")
        return ErrorCode.NONE

    def delete(self, group_id: str, *, has_offsets: bool) -> ErrorCode:
        """DeleteGroups for one group, as Kafka's coordinator decides it.

        An Empty group (no members, not rebalancing) is forgotten and NONE returned; so is a
        group we only know from its committed offsets (`has_offsets`; the caller drops those).
        A group with members or mid-rebalance is NON_EMPTY_GROUP and kept; a group neither
        here nor with offsets is GROUP_ID_NOT_FOUND. Member ids handed out by
        MEMBER_ID_REQUIRED but not yet joined do not make a group non-empty (nor in Kafka):
        their JoinGroup then gets UNKNOWN_MEMBER_ID and the client starts over. A consumer
        group is Empty when it has no members.
        """
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return ErrorCode.NON_EMPTY_GROUP
            del self.consumer.groups[group_id]
            log.info("group %s: deleted", group_id)
            return ErrorCode.NONE
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE if has_offsets else ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        del self.groups[group_id]
        log.info("group %s: deleted", group_id)
        return ErrorCode.NONE

    def is_empty(self, group_id: str) -> bool:
        """True if `group_id` is Empty (no members, not rebalancing) or unknown here: the
        groups whose committed offsets may expire."""
        group = self.groups.get(group_id)
        consumer_group = self.consumer.groups.get(group_id)
        return ((group is None or group.state is GroupState.EMPTY)
                and (consumer_group is None or not consumer_group.members))

    def forget_if_empty(self, group_id: str) -> bool:
        """Forget `group_id` (it is Dead) if it is Empty, and say whether it was.

        The caller knows it has no committed offsets left. A group holding member ids handed
        out by MEMBER_ID_REQUIRED is kept: their JoinGroup is on its way.
        """
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return False
            del self.consumer.groups[group_id]
            log.info("group %s: dead (empty, no committed offsets)", group_id)
            return True
        group = self.groups.get(group_id)
        if group is None or group.state is not GroupState.EMPTY or group.pending:
            return False
        group.state = GroupState.DEAD
        del self.groups[group_id]
        log.info("group %s: dead (empty, no committed offsets)", group_id)
        return True

    def check_commit(self, group_id: str, generation_id: int, member_id: str,
                     group_instance_id: str | None = None, version: int = 9) -> ErrorCode:
        """May this OffsetCommit be applied? generation -1 with no member id (and no
        instance id) is a simple (standalone) commit, allowed while the group has no
        members. A member's commit is fenced by member id, instance id and generation as
        its Heartbeat is, but, as in Kafka's GroupCoordinator, it is accepted while the
        group prepares a rebalance (the commit a consumer makes when its partitions are
        revoked: refusing it redelivered everything since its last commit on every
        rebalance) and refused (REBALANCE_IN_PROGRESS) only while the new generation's
        assignment is being synced. In a consumer group the generation is the member
        epoch (`ConsumerGroupCoordinator.check_member`), and a member's commit needs
        OffsetCommit v9+ (UNSUPPORTED_VERSION), as in Kafka."""
        if group_id in self.consumer.groups:
            verdict = self.consumer.check_member(group_id, member_id, generation_id)
            if verdict is ErrorCode.NONE and member_id and version < 9:
                return ErrorCode.UNSUPPORTED_VERSION
            return verdict
        group = self.groups.get(group_id)
        if generation_id < 0 and not member_id and group_instance_id is None:
            if group is None or not group.members:
                return ErrorCode.NONE
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if (error := fenced(group, member_id, group_instance_id)) is not None:
            return error
        member = group.members[member_id]
        member.last_seen = self._clock()  # a member's commit is a sign of life, as a heartbeat
        if generation_id != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # -- time ------------------------------------------------------------------------------
    def sweep(self) -> None:
        """Expire sessions, pending member ids, and rebalance/sync deadlines."""
        self.consumer.sweep()
        now = self._clock()
        for group in list(self.groups.values()):
            for mid, deadline in list(group.pending.items()):
                if now >= deadline:
                    del group.pending[mid]
            expired = [m for m in group.members.values()
                       if not m.awaiting_join and not m.awaiting_sync
                       and now - m.last_seen > m.session_timeout]
            for m in expired:
                self._rebalance.remove_member(group, m, None, "session timeout")
            if expired:
                self._rebalance.after_removal(group, "session timeout")
            if group.state is GroupState.PREPARING_REBALANCE:
                if group.join_deadline is not None and now >= group.join_deadline:
                    self._rebalance.complete_join(group)
                else:
                    self._rebalance.maybe_complete_join(group)
            elif (group.state is GroupState.COMPLETING_REBALANCE
                  and group.sync_deadline is not None and now >= group.sync_deadline):
                for m in list(group.members.values()):
                    if not m.awaiting_sync:
                        self._rebalance.remove_member(group, m, None, "did not sync in time")
                self._rebalance.after_removal(group, "leader did not sync in time")

    def close(self) -> None:
        """Answer every waiting JoinGroup/SyncGroup (the broker is shutting down)."""
        for group in self.groups.values():
            for m in group.members.values():
                if m.awaiting_join and m.join_waiter is not None:
                    m.join_waiter.set_result(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                        m.member_id))
                if m.awaiting_sync and m.sync_waiter is not None:
                    m.sync_waiter.set_result(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
