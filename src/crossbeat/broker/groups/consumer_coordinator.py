"""`ConsumerGroupCoordinator`: ConsumerGroupHeartbeat (KIP-848) and the fencing of the
commits and fetches of its members, with the sweep that enforces session and revocation
timeouts. See consumer_group.py for epochs and reconciliation.

Heartbeat contract (Kafka 4's GroupMetadataManager, without classic-member migration):

- epoch 0 joins (or rejoins: a known member id that joins again has lost its partitions
  and starts from none); -1 leaves; -2 is a static member leaving for a restart: it keeps
  its partitions for its session timeout, and a join with its instance id (any member id)
  takes them over without a rebalance. A join naming an instance id still held by an
  active member is UNRELEASED_INSTANCE_ID;
- any other epoch must be the member's current one, or its previous one if the member
  owns only partitions it still has (a lost answer); else FENCED_MEMBER_EPOCH. An unknown
  member id is UNKNOWN_MEMBER_ID (also after a broker restart: groups live in memory, and
  the client rejoins on it);
- a join with a non-empty classic group's id is GROUP_ID_NOT_FOUND; an empty classic group
  becomes a consumer group;
- the answer carries the assignment when the member's epoch or partitions changed, on
  joins, when the member's full state was sent (after a reconnect), and when the member
  was behind (it missed an answer).

A member not heard from for the session timeout is removed, and so is one that has not
revoked within its rebalance timeout; either bumps the group epoch. The new target is
computed at the next heartbeat of any member.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.groups.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, Assignment
from crossbeat.broker.groups.consumer_group import (
    EMPTY,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    group_doc,
    reconcile,
    restored_group,
)
from crossbeat.broker.groups.rebalance import MembersListener
from crossbeat.broker.groups.state import Group, GroupState

log = logging.getLogger(__name__)

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@dataclass
class HeartbeatResult:
    """The ConsumerGroupHeartbeat answer; `assignment` None means not sent."""

    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    assignment: Assignment | None = None


@dataclass
class Heartbeat:
    """One ConsumerGroupHeartbeat, topics by name (None: unchanged since the last one)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_names: list[str] | None = None
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


def _error(code: ErrorCode, message: str | None = None) -> HeartbeatResult:
    return HeartbeatResult(code, message)


class ConsumerGroupCoordinator:
    """Every consumer (KIP-848) group; `classic` is the classic coordinator's group table,
    shared so that a group id names one kind of group only."""

    def __init__(self, *, heartbeat_interval_ms: int = 5000, session_timeout_ms: int = 45000,
                 clock: Callable[[], float], classic: dict[str, Group],
                 on_members_change: MembersListener,
                 on_state: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self._on_state = on_state or (lambda group_id, doc: None)
        self._kept: dict[str, dict[str, Any]] = {}  # the last state handed to on_state
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self._session = session_timeout_ms / 1000
        self._clock = clock
        self._classic = classic
        self._on_members_change = on_members_change
        self.groups: dict[str, ConsumerGroup] = {}

    # -- kept across restarts ------------------------------------------------------------
    def restore(self, group_id: str, doc: dict[str, Any]) -> None:
        """Take back a group `consumer_group.group_doc` described (raises KeyError,
        TypeError or ValueError for one that does not describe a group)."""
        group = restored_group(group_id, doc, self._clock())
        self.groups[group_id] = group
        self._kept[group_id] = doc

    def _keep(self, group: ConsumerGroup | None) -> None:
        """Hand `on_state` the group's state if it changed (membership, epochs, partitions;
        not sessions); an empty group is not kept (its Empty note forgets it)."""
        if group is None:
            return
        if not group.members:
            self._kept.pop(group.group_id, None)
            return
        doc = group_doc(group)
        if self._kept.get(group.group_id) != doc:
            self._kept[group.group_id] = doc
            self._on_state(group.group_id, doc)

    # -- ConsumerGroupHeartbeat --------------------------------------------------------------
    def heartbeat(self, hb: Heartbeat, topics: Mapping[str, int]) -> HeartbeatResult:
        """Handle one heartbeat; `topics` is every existing topic's partition count."""
        try:
            return self._heartbeat(hb, topics)
        finally:
            self._keep(self.groups.get(hb.group_id))

    def _heartbeat(self, hb: Heartbeat, topics: Mapping[str, int]) -> HeartbeatResult:
        invalid = self._invalid(hb)
        if invalid is not None:
            return invalid
        classic = self._classic.get(hb.group_id)
        if classic is not None:
            if classic.members or classic.pending or classic.state is not GroupState.EMPTY:
                return _error(ErrorCode.GROUP_ID_NOT_FOUND,
                              f"Group {hb.group_id} is not a consumer group.")
            if hb.member_epoch == 0:
                del self._classic[hb.group_id]  # an empty classic group converts
        group = self.groups.get(hb.group_id)
        if hb.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, hb)
        if group is None:
            if hb.member_epoch != 0:
                return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"Unknown member {hb.member_id}.")
            group = self.groups[hb.group_id] = ConsumerGroup(hb.group_id)
        now = self._clock()
        epoch_before = group.group_epoch
        member_or_error = self._member(group, hb, now)
        if isinstance(member_or_error, HeartbeatResult):
            return member_or_error
        member = member_or_error
        before = member.snapshot()
        member.last_seen = now
        member.client_id, member.client_host = hb.client_id, hb.client_host
        if hb.rack_id is not None:
            member.rack_id = hb.rack_id
        if hb.rebalance_timeout_ms >= 0:
            member.rebalance_timeout = hb.rebalance_timeout_ms / 1000
        subscription = (member.subscribed_names, member.subscribed_regex, member.server_assignor)
        if hb.subscribed_names is not None:
            member.subscribed_names = frozenset(hb.subscribed_names)
        if hb.subscribed_regex is not None:
            member.subscribed_regex = hb.subscribed_regex or None  # "" is librdkafka's none
        if hb.server_assignor is not None:
            member.server_assignor = hb.server_assignor
        # one bump per heartbeat: a join also changes the subscriptions and their topics
        if subscription != (member.subscribed_names, member.subscribed_regex,
                            member.server_assignor) and group.group_epoch == epoch_before:
            self._bump(group, f"member {member.member_id} subscription changed")
        metadata = self._metadata(group, topics)
        if metadata != group.metadata:
            group.metadata = metadata
            if group.group_epoch == epoch_before:
                self._bump(group, "subscribed topics' metadata changed")
        if group.assignment_epoch < group.group_epoch:
            self._assign(group, topics)
        reconcile(member, group.assignment_epoch, group.target.get(member.member_id, EMPTY),
                  group.owners(), hb.owned, now)
        full = (hb.member_epoch == 0 or (hb.owned is not None and hb.subscribed_names is not None
                                         and hb.rebalance_timeout_ms >= 0))
        send = full or member.snapshot() != before or hb.member_epoch != member.member_epoch
        return HeartbeatResult(ErrorCode.NONE, None, member.member_id, member.member_epoch,
                               member.assigned if send else None)

    def _invalid(self, hb: Heartbeat) -> HeartbeatResult | None:
        """Kafka's request validation (INVALID_REQUEST and friends), or None."""
        bad = ErrorCode.INVALID_REQUEST
        if not hb.group_id:
            return _error(bad, "GroupId can't be empty.")
        if not hb.member_id:
            return _error(bad, "MemberId can't be empty.")
        if hb.member_epoch < STATIC_LEAVE_EPOCH:
            return _error(bad, f"MemberEpoch {hb.member_epoch} is invalid.")
        if hb.member_epoch == STATIC_LEAVE_EPOCH and hb.instance_id is None:
            return _error(bad, "InstanceId can't be null when MemberEpoch is -2.")
        if hb.member_epoch == 0:
            if hb.rebalance_timeout_ms < 0:
                return _error(bad, "RebalanceTimeoutMs must be provided in first request.")
            if hb.owned:
                return _error(bad, "TopicPartitions must be empty when (re-)joining.")
            if hb.subscribed_names is None and hb.subscribed_regex is None:
                return _error(bad, "SubscribedTopicNames or SubscribedTopicRegex must be set "
                                   "in first request.")
        if hb.server_assignor is not None and hb.server_assignor not in ASSIGNORS:
            return _error(ErrorCode.UNSUPPORTED_ASSIGNOR,
                          f"ServerAssignor {hb.server_assignor} is not supported. Supported "
                          f"assignors: {', '.join(ASSIGNORS)}.")
        if hb.subscribed_regex:
            try:
                re.compile(hb.subscribed_regex)
            except re.error as exc:
                return _error(ErrorCode.INVALID_REGULAR_EXPRESSION,
                              f"SubscribedTopicRegex {hb.subscribed_regex} is invalid: {exc}")
        return None

    def _member(self, group: ConsumerGroup, hb: Heartbeat,
                now: float) -> ConsumerMember | HeartbeatResult:
        """The heartbeat's member, joined, replaced or validated; or the error answer."""
        static = (next((m for m in group.members.values() if m.instance_id == hb.instance_id),
                       None) if hb.instance_id is not None else None)
        member = group.members.get(hb.member_id)
        if hb.member_epoch == 0:
            if static is not None and static.member_id != hb.member_id:
                if static.member_epoch != STATIC_LEAVE_EPOCH:
                    return _error(ErrorCode.UNRELEASED_INSTANCE_ID,
                                  f"Static member {hb.instance_id} is still in use.")
                return self._replace_static(group, static, hb.member_id)
            if member is None:
                member = ConsumerMember(hb.member_id, hb.instance_id, hb.rack_id, hb.client_id,
                                        hb.client_host, hb.rebalance_timeout_ms / 1000,
                                        last_seen=now)
                group.members[member.member_id] = member
                if len(group.members) == 1:
                    self._on_members_change(group.group_id, True)
                self._bump(group, f"member {member.member_id} joined")
            else:
                # it lost its partitions (fenced, or restarted with the same id): from nothing
                member.assigned = member.revoking = EMPTY
                member.member_epoch = member.previous_epoch = 0
                member.state, member.revoke_deadline = MemberState.STABLE, None
            return member
        if member is None:
            return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"Unknown member {hb.member_id}.")
        if hb.instance_id is not None and member.instance_id != hb.instance_id:
            return _error(ErrorCode.FENCED_INSTANCE_ID,
                          f"Static member {hb.instance_id} was replaced.")
        if hb.member_epoch > member.member_epoch:
            return _error(ErrorCode.FENCED_MEMBER_EPOCH,
                          f"Epoch {hb.member_epoch} is ahead of {member.member_epoch}.")
        if hb.member_epoch < member.member_epoch and (
                hb.member_epoch != member.previous_epoch or hb.owned is None
                or not hb.owned <= member.assigned):
            return _error(ErrorCode.FENCED_MEMBER_EPOCH,
                          f"Epoch {hb.member_epoch} is behind {member.member_epoch}.")
        return member

    def _replace_static(self, group: ConsumerGroup, old: ConsumerMember,
                        new_id: str) -> ConsumerMember:
        """A static member back from a restart takes over its instance's partitions (and its
        target) under its new member id, with no rebalance."""
        old_id = old.member_id
        del group.members[old_id]
        old.member_id = new_id
        old.member_epoch = max(old.previous_epoch, 0)  # the epoch it left at
        group.members[new_id] = old
        group.target[new_id] = group.target.pop(old_id, EMPTY)
        log.info("group %s: static member %s rejoined as %s", group.group_id, old.instance_id,
                 new_id)
        return old

    def _leave(self, group: ConsumerGroup | None, hb: Heartbeat) -> HeartbeatResult:
        member = group.members.get(hb.member_id) if group is not None else None
        if group is None or member is None:
            return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"Unknown member {hb.member_id}.")
        if hb.member_epoch == STATIC_LEAVE_EPOCH:
            # keeps what it holds for its session timeout, awaiting its next incarnation
            member.previous_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            member.revoking, member.revoke_deadline = EMPTY, None
            member.last_seen = self._clock()
        else:
            self.remove(group, member, "left")
        return HeartbeatResult(ErrorCode.NONE, None, hb.member_id, hb.member_epoch)

    # -- membership, epochs, target ----------------------------------------------------------
    def remove(self, group: ConsumerGroup, member: ConsumerMember, why: str) -> None:
        """Drop `member` (its partitions become free) and bump the group epoch."""
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        log.info("group %s: removed member %s (%s)", group.group_id, member.member_id, why)
        self._bump(group, f"member {member.member_id} {why}")
        if not group.members:
            self._on_members_change(group.group_id, False)

    def _bump(self, group: ConsumerGroup, why: str) -> None:
        group.group_epoch += 1
        log.info("group %s: epoch %d: %s", group.group_id, group.group_epoch, why)

    @staticmethod
    def _subscribed(member: ConsumerMember, topics: Mapping[str, int]) -> frozenset[str]:
        names = {t for t in member.subscribed_names if t in topics}
        if member.subscribed_regex:
            pattern = re.compile(member.subscribed_regex)
            names.update(t for t in topics if pattern.fullmatch(t))
        return frozenset(names)

    def _metadata(self, group: ConsumerGroup, topics: Mapping[str, int]) -> dict[str, int]:
        wanted: set[str] = set()
        for m in group.members.values():
            wanted |= self._subscribed(m, topics)
        return {t: topics[t] for t in sorted(wanted)}

    def _assign(self, group: ConsumerGroup, topics: Mapping[str, int]) -> None:
        """Compute the target assignment of the current group epoch."""
        choices = [m.server_assignor for m in group.members.values() if m.server_assignor]
        # the assignor most members ask for (ties: the first asked), as Kafka chooses
        name = max(choices, key=choices.count) if choices else DEFAULT_ASSIGNOR
        subscriptions = {mid: self._subscribed(m, topics) for mid, m in group.members.items()}
        group.target = ASSIGNORS[name](subscriptions, topics, group.target)
        group.assignor = name
        group.assignment_epoch = group.group_epoch
        log.info("group %s: target assignment of epoch %d by %s", group.group_id,
                 group.group_epoch, name)

    # -- commits and fetches -------------------------------------------------------------
    def check_member(self, group_id: str, member_id: str | None, epoch: int) -> ErrorCode:
        """May this member (id, epoch) commit or fetch offsets of `group_id`? Without a
        member (epoch < 0) only while the group has none (tools, standalone consumers);
        a member must exist (UNKNOWN_MEMBER_ID) with this epoch (STALE_MEMBER_EPOCH)."""
        group = self.groups.get(group_id)
        if epoch < 0 and not member_id and (group is None or not group.members):
            return ErrorCode.NONE
        member = group.members.get(member_id or "") if group is not None else None
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # -- time ------------------------------------------------------------------------------
    def sweep(self) -> None:
        """Remove members past their session timeout or revocation deadline."""
        now = self._clock()
        for group in list(self.groups.values()):
            removed = False
            for m in list(group.members.values()):
                if now - m.last_seen > self._session:
                    self.remove(group, m, "session timeout")
                    removed = True
                elif m.revoke_deadline is not None and now > m.revoke_deadline:
                    self.remove(group, m, "did not revoke in time")
                    removed = True
            if removed:
                self._keep(group)

    @staticmethod
    def new_member_id() -> str:
        """A member id for v0 joins, which leave it to the coordinator (KIP-1082 moved it)."""
        return uuid.uuid4().hex
