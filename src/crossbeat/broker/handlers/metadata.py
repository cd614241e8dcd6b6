"""Metadata (3): brokers (just us), controller (us) and topics, auto-creating on request.

`topics = null` (v1+) or an empty list at v0 means every topic. A topic is created when the
client allows it (always at v0-v3, `allow_auto_topic_creation` from v4) and the broker's
`auto_create_topics` setting is on; a creation that fails gives the topic that failure's
error, as Kafka's broker did when it created topics itself (KAFKA_STORAGE_ERROR when the
disk refuses it, which a producer waits out: it asks again). v10+ carries topic ids; v12+
may ask for a topic by id alone (a null name: how KIP-848 consumers resolve their
assignment), and an unknown id is UNKNOWN_TOPIC_ID with a null name.
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.metadata import MetadataResponse

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.topics import Topic, TopicError, check_topic_name, leader_epoch

R = MetadataResponse
_Broker = R.MetadataResponseBroker
_Topic = R.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition


def topic_entry(topic: Topic, node_id: int) -> Any:
    return _Topic(
        error_code=0, name=topic.name, topic_id=topic.topic_id, is_internal=False,
        partitions=[
            _Partition(error_code=0, partition_index=i, leader_id=node_id,
                       leader_epoch=leader_epoch(stream),
                       replica_nodes=[node_id], isr_nodes=[node_id], offline_replicas=[])
            for i, stream in enumerate(topic.partitions)
        ],
    )


def error_entry(name: str | None, code: ErrorCode, topic_id: uuid.UUID | None = None) -> Any:
    return _Topic(error_code=int(code), name=name, topic_id=topic_id or uuid.UUID(int=0),
                  is_internal=False, partitions=[])


async def handle(ctx: Context, req: Any) -> Any:
    broker = ctx.broker
    topics = broker.topics
    requested = req.topics
    if ctx.version == 0 and not requested:
        requested = None
    allow_create = ctx.version < 4 or bool(req.allow_auto_topic_creation)
    entries = []
    if requested is None:
        entries = [topic_entry(t, broker.node_id) for t in topics.all()]
    else:
        for wanted in requested:
            name = wanted.name
            if name is None:  # by id (v12+)
                by_id = topics.by_id(wanted.topic_id)
                entries.append(topic_entry(by_id, broker.node_id) if by_id is not None
                               else error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID,
                                                wanted.topic_id))
                continue
            topic = topics.get(name)
            if topic is None and allow_create and broker.settings.auto_create_topics:
                try:
                    topic = topics.create(name, broker.settings.num_partitions)
                except TopicError as exc:
                    entries.append(error_entry(name, exc.code))
                    continue
            if topic is None:
                try:
                    check_topic_name(name)
                    entries.append(error_entry(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                except TopicError as exc:
                    entries.append(error_entry(name, exc.code))
                continue
            entries.append(topic_entry(topic, broker.node_id))
    return R(
        throttle_time_ms=0,
        brokers=[_Broker(node_id=broker.node_id, host=broker.host, port=broker.port, rack=None)],
        cluster_id=broker.settings.cluster_id,
        controller_id=broker.node_id,
        error_code=0,
        topics=entries,
    )
