"""A KIP-848 consumer group (`group.protocol=consumer`): its members, epochs and target
assignment, and `reconcile`, which moves one member towards its target.

Epochs: the group epoch is bumped whenever membership, a subscription, or the partition
count of a subscribed topic changes; the target assignment is recomputed for that epoch
(the assignment epoch). Each member has its own member epoch and reaches the assignment
epoch incrementally, as Kafka's CurrentAssignmentBuilder does:

- a member whose current partitions include some the target gives to others is first told
  to revoke them (UNREVOKED_PARTITIONS: its epoch stays, it keeps only current ∩ target);
- once it reports (in its heartbeat's owned partitions) that it no longer holds them, it
  moves to the new epoch and gets the target partitions that are free;
- target partitions still held by another member (assigned to it, or awaiting its
  revocation) are withheld (UNRELEASED_PARTITIONS) until that member lets go.

So no partition is ever held by two members at once.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from crossbeat.broker.groups.assignors import Assignment, TopicPartition

EMPTY: Assignment = frozenset()


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass
class ConsumerMember:
    """One member; `assigned` and `revoking` are what it holds as far as we know."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: float  # seconds: how long it may take to revoke
    subscribed_names: frozenset[str] = frozenset()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = EMPTY
    revoking: Assignment = EMPTY
    last_seen: float = 0.0
    revoke_deadline: float | None = None  # while UNREVOKED_PARTITIONS

    def snapshot(self) -> tuple[int, MemberState, Assignment, Assignment]:
        """What a heartbeat answer depends on: changed means the assignment is sent."""
        return self.member_epoch, self.state, self.assigned, self.revoking


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str | None = None  # chosen when the target was last computed
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # partition counts of the subscribed topics the current group epoch was computed with
    metadata: dict[str, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroup states: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def owners(self) -> dict[TopicPartition, str]:
        """Who holds each partition (assigned, or not yet revoked)."""
        return {tp: m.member_id for m in self.members.values() for tp in m.assigned | m.revoking}


def owns_revoking(member: ConsumerMember, owned: Assignment | None) -> bool:
    """Whether `member` may still hold partitions it was asked to revoke: unknown (`owned`
    not reported) counts as yes."""
    return owned is None or bool(owned & member.revoking)


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment,
              owners: Mapping[TopicPartition, str], owned: Assignment | None,
              now: float) -> None:
    """Advance `member` towards `target` (the group's target for it at `target_epoch`).

    `owners` says who holds each partition now; `owned` is what the member reported holding
    in this heartbeat (None: not reported). Changes the member in place.
    """
    if member.state is MemberState.STABLE and member.member_epoch == target_epoch:
        # already at the target epoch (every target change bumps it): nothing to do
        return
    if member.state is MemberState.UNREVOKED_PARTITIONS and owns_revoking(member, owned):
        return  # still holds what it must give up: nothing moves until it lets go
    # (once it has revoked, straight on to the current target: Kafka steps one epoch and
    # catches up at the next heartbeat; the result is the same, a round trip sooner)
    _next(member, target_epoch, target, owners, now)


def _next(member: ConsumerMember, epoch: int, target: Assignment,
          owners: Mapping[TopicPartition, str], now: float) -> None:
    keep = member.assigned & target
    revoke = member.assigned - target
    wanted = target - member.assigned
    unreleased = {tp for tp in wanted if owners.get(tp, member.member_id) != member.member_id
                  or tp in member.revoking}
    member.previous_epoch = member.member_epoch
    if revoke:
        # epoch unchanged: the member must give these up before it gets anything new
        member.state = MemberState.UNREVOKED_PARTITIONS
        member.assigned, member.revoking = keep, frozenset(revoke)
        member.revoke_deadline = now + member.rebalance_timeout
        return
    member.member_epoch = epoch
    member.assigned = keep | (wanted - unreleased)
    member.revoking = EMPTY
    member.revoke_deadline = None
    member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE


def _partitions(assignment: Assignment) -> list[list[str | int]]:
    return [[topic, partition] for topic, partition in sorted(assignment)]


def _assignment(doc: list[list[str | int]]) -> Assignment:
    return frozenset((str(topic), int(partition)) for topic, partition in doc)


def group_doc(group: ConsumerGroup) -> dict[str, object]:
    """What a consumer group is, as JSON, for the offset store to keep (as Kafka keeps a
    consumer group's records): restored at start (`restored_group`), its members carry on
    with their epochs and partitions. Sessions (`last_seen`) are not part of it."""
    return {
        "kind": "consumer",
        "groupEpoch": group.group_epoch,
        "assignmentEpoch": group.assignment_epoch,
        "assignor": group.assignor,
        "metadata": dict(sorted(group.metadata.items())),
        "target": {mid: _partitions(a) for mid, a in sorted(group.target.items())},
        "members": [
            {
                "id": m.member_id, "instance": m.instance_id, "rack": m.rack_id,
                "client": m.client_id, "host": m.client_host, "rebalance": m.rebalance_timeout,
                "names": sorted(m.subscribed_names), "regex": m.subscribed_regex,
                "assignor": m.server_assignor, "epoch": m.member_epoch,
                "previous": m.previous_epoch, "state": m.state.value,
                "assigned": _partitions(m.assigned), "revoking": _partitions(m.revoking),
            }
            for m in group.members.values()
        ],
    }


def restored_group(group_id: str, doc: dict[str, object], now: float) -> ConsumerGroup:
    """The group `group_doc` described, each member's session starting `now` (and a member
    that was revoking given its rebalance timeout from now). Raises KeyError, TypeError or
    ValueError for a document that is not one."""
    d: dict[str, object] = doc
    metadata = d["metadata"]
    target = d["target"]
    members = d["members"]
    if not isinstance(metadata, dict) or not isinstance(target, dict) or not isinstance(members, list):
        raise TypeError("not a consumer group document")
    group = ConsumerGroup(group_id, int(str(d["groupEpoch"])), int(str(d["assignmentEpoch"])),
                          None if d["assignor"] is None else str(d["assignor"]),
                          metadata={str(t): int(n) for t, n in metadata.items()},
                          target={str(mid): _assignment(a) for mid, a in target.items()})
    for m in members:
        state = MemberState(m["state"])
        member = ConsumerMember(
            str(m["id"]), m["instance"], m["rack"], str(m["client"]), str(m["host"]),
            float(m["rebalance"]), frozenset(str(t) for t in m["names"]), m["regex"],
            m["assignor"], int(m["epoch"]), int(m["previous"]), state,
            _assignment(m["assigned"]), _assignment(m["revoking"]), now,
            now + float(m["rebalance"]) if state is MemberState.UNREVOKED_PARTITIONS else None,
        )
        group.members[member.member_id] = member
    if not group.members:
        raise ValueError("a kept consumer group has members")
    return group
