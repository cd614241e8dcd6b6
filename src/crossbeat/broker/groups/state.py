"""What the coordinator holds per group: its state, its members, and the answers a
JoinGroup or SyncGroup long poll resolves to; plus who a request's member ids name."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

from crossbeat.broker.errors import ErrorCode


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class JoinResult:
    """The JoinGroup answer for one member."""

    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout: float  # seconds
    rebalance_timeout: float  # seconds
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_seen: float
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None and not self.sync_waiter.done()


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)  # member id -> deadline
    join_deadline: float | None = None  # PreparingRebalance: give up waiting at
    join_not_before: float = 0.0  # initial rebalance delay of an empty group
    sync_deadline: float | None = None  # CompletingRebalance: leader must sync by


def static_member(group: Group, group_instance_id: str | None) -> Member | None:
    """The current member of static instance `group_instance_id`, if any."""
    if group_instance_id is None:
        return None
    return next((m for m in group.members.values() if m.group_instance_id == group_instance_id),
                None)


def fenced(group: Group, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
    """Kafka's validateCurrentMember: None if `member_id` is a member (and, given an instance
    id, that instance's current member id); FENCED_INSTANCE_ID if the instance has moved on to
    another member id, UNKNOWN_MEMBER_ID otherwise."""
    if group_instance_id is not None:
        static = static_member(group, group_instance_id)
        if static is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None if static.member_id == member_id else ErrorCode.FENCED_INSTANCE_ID
    return None if member_id in group.members else ErrorCode.UNKNOWN_MEMBER_ID
