"""One handler module per Kafka API; `HANDLERS` maps API keys to their `handle` coroutine."""

from __future__ import annotations

from crossbeat.broker.handlers import (
    alter_configs,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_configs,
    describe_groups,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sync_group,
)
from crossbeat.broker.handlers.context import Context, Handler

HANDLERS: dict[int, Handler] = {
    0: produce.handle,
    1: fetch.handle,
    2: list_offsets.handle,
    3: metadata.handle,
    8: offset_commit.handle,
    9: offset_fetch.handle,
    10: find_coordinator.handle,
    11: join_group.handle,
    12: heartbeat.handle,
    13: leave_group.handle,
    14: sync_group.handle,
    15: describe_groups.handle,
    16: list_groups.handle,
    18: api_versions.handle,
    19: create_topics.handle,
    20: delete_topics.handle,
    21: delete_records.handle,
    22: init_producer_id.handle,
    23: offset_for_leader_epoch.handle,
    32: describe_configs.handle,
    33: alter_configs.handle,
    37: create_partitions.handle,
    42: delete_groups.handle,
    44: incremental_alter_configs.handle,
    68: consumer_group_heartbeat.handle,
    69: consumer_group_describe.handle,
}

__all__ = ["HANDLERS", "Context", "Handler"]
