"""What the coordinator holds per group: its state, its members, and the answers a
JoinGroup or SyncGroup long poll resolves to; plus who a request's member ids name."""

from __future__ import annotations

import asyncio
import base64
import enum
from dataclasses import dataclass, field
from typing import Any

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


def stable_doc(group: Group) -> dict[str, Any]:
    """What a Stable classic group is, as JSON, for the offset store to keep (Kafka's group
    metadata record): restored at start (`restored_group`), its members carry on with their
    generation and assignment instead of all rejoining."""
    return {
        "generation": group.generation,
        "protocolType": group.protocol_type,
        "protocol": group.protocol_name,
        "leader": group.leader_id,
        "members": [
            {
                "id": m.member_id, "instance": m.group_instance_id, "client": m.client_id,
                "host": m.client_host, "session": m.session_timeout, "rebalance": m.rebalance_timeout,
                "type": m.protocol_type,
                "protocols": [[name, base64.b64encode(meta).decode("ascii")] for name, meta in m.protocols],
                "assignment": base64.b64encode(m.assignment).decode("ascii"),
            }
            for m in group.members.values()
        ],
    }


def restored_group(group_id: str, doc: dict[str, Any], now: float) -> Group:
    """The Stable group `stable_doc` described, each member's session starting `now` (as
    Kafka's coordinator schedules every loaded member's session anew). Raises KeyError,
    TypeError or ValueError for a document that is not one."""
    group = Group(group_id, GroupState.STABLE, int(doc["generation"]), doc["protocolType"],
                  doc["protocol"], doc["leader"])
    for m in doc["members"]:
        member = Member(
            str(m["id"]), m["instance"], str(m["client"]), str(m["host"]), float(m["session"]),
            float(m["rebalance"]), str(m["type"]),
            [(str(name), base64.b64decode(meta)) for name, meta in m["protocols"]], now,
            base64.b64decode(m["assignment"]),
        )
        group.members[member.member_id] = member
    if not group.members or group.leader_id not in group.members:
        raise ValueError("a stable group needs its members and its leader among them")
    return group
