"""The classic consumer-group coordinator (JoinGroup, SyncGroup, Heartbeat, LeaveGroup).

States, as in Kafka's GroupCoordinator::

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                   ▲      ▲                                      │ leader's SyncGroup
      │                   │      └──────── join / leave / expiry ───────┤
      └── last member ────┴───────────── join / leave / expiry ── Stable ◀┘

- JoinGroup is a long poll: it returns when every known member has (re)joined or the
  largest rebalance timeout passes (members that did not rejoin are removed). Each
  completed join bumps the generation; the leader (first member) receives all members'
  metadata, chooses assignments, and sends them in its SyncGroup.
- SyncGroup from followers is a long poll until the leader's SyncGroup arrives.
- JoinGroup v4+ with an empty member id is answered MEMBER_ID_REQUIRED with a fresh id,
  which the client must rejoin with (before its session timeout).
- Heartbeat, SyncGroup and OffsetCommit are fenced by generation (ILLEGAL_GENERATION) and
  membership (UNKNOWN_MEMBER_ID); during a rebalance they get REBALANCE_IN_PROGRESS.
- A member that sends nothing for its session timeout is removed (a rebalance follows);
  members waiting in JoinGroup or SyncGroup are alive by definition.
- Static members (KIP-345, a group.instance.id) skip MEMBER_ID_REQUIRED. One that joins
  with an empty member id while its instance id is still a member (it restarted within its
  session timeout) takes over that member under a fresh member id: its old id is fenced and
  it keeps its assignment. In a Stable group whose protocol choice does not change, that
  is all: no rebalance, same generation, and the leader named in its answer is the old one
  so it does not assign. Otherwise (mid-rebalance, or a changed protocol) a rebalance
  follows. Requests carrying an instance id whose member id is no longer the instance's
  are FENCED_INSTANCE_ID; an instance id that is no member is UNKNOWN_MEMBER_ID.
Deadlines are enforced by `sweep`, which the broker calls every `SWEEP_INTERVAL` seconds.
All methods run on the event loop and change state without awaiting in between.

Modules: `state` (groups, members, results), `rebalance` (the state transitions),
`coordinator` (the request entry points and the sweep). KIP-848 consumer groups
(ConsumerGroupHeartbeat, `group.protocol=consumer`): `consumer_group` (members, epochs,
reconciliation), `assignors` (server-side `uniform` and `range`), `consumer_coordinator`
(the heartbeat, fencing and sweep), reached as `GroupCoordinator.consumer`.
"""

from crossbeat.broker.groups.coordinator import SWEEP_INTERVAL, GroupCoordinator
from crossbeat.broker.groups.state import Group, GroupState, JoinResult, Member, SyncResult

__all__ = ["SWEEP_INTERVAL", "Group", "GroupCoordinator", "GroupState", "JoinResult", "Member",
           "SyncResult"]
