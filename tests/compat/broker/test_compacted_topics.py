"""Compacted topics with real clients: the topics Kafka Connect and Kafka Streams create
(`cleanup.policy=compact`, with the compaction configs) are accepted and described as Kafka
describes them; a compact-only topic keeps every record, tombstones included, however short
its retention (no log cleaner runs here, and retention applies only with `delete` in the
policy, as in Kafka), while a `delete` topic with the same retention loses them; a policy
altered at run time (incremental and legacy alters) applies at the next retention pass,
also after a restart."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from tests.compat.broker.helpers import (
    BrokerProcess,
    consume_n,
    new_consumer,
    produce_all,
    running_broker,
    watermarks,
)

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "data", "retention_check_interval_ms = 100") as proc:
        yield proc


def _until(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # each check is a round trip to the broker
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")


def _policy(admin: AdminClient, topic: str) -> tuple[str, ConfigSource]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entry = admin.describe_configs([res])[res].result(20)["cleanup.policy"]
    return entry.value, ConfigSource(entry.source)


def _alter(admin: AdminClient, topic: str, op: AlterConfigOpType, value: str) -> None:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", value, incremental_operation=op)])
    admin.incremental_alter_configs([res])[res].result(20)


def _produce(address: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    """Keyed records, None values being tombstones."""
    producer = Producer({"bootstrap.servers": address, "acks": "all"})
    failures: list[Any] = []
    for key, value in records:
        producer.produce(topic, key=key, value=value,
                         on_delivery=lambda err, _msg: failures.append(err) if err else None)
    assert producer.flush(30) == 0
    assert not failures, failures


def _records(address: str, topic: str, n: int) -> list[tuple[bytes, bytes | None]]:
    consumer = new_consumer(address, f"reader-{topic}")
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        return [(m.key(), m.value()) for m in consume_n(consumer, n)]
    finally:
        consumer.close()


def _retention_ran(address: str, delete_topic: str) -> None:
    """Return once a whole retention pass started after this call: a record is written to
    `delete_topic` (retention.ms=1) and retention removes it, twice. A pass visits every
    partition once, so the pass that removes the second record began after the first was
    removed, i.e. after this call."""
    for _ in range(2):
        produce_all(address, delete_topic, [(b"k", b"sync")], acks="all")
        _, high = watermarks(address, delete_topic)
        _until(lambda high=high: watermarks(address, delete_topic) == (high, high),
               "retention to empty the delete topic")


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_compact_topic_keeps_what_retention_takes_from_a_delete_topic(
        broker: BrokerProcess, topic_name: str) -> None:
    compact, delete = f"{topic_name}-c", f"{topic_name}-d"
    admin = AdminClient({"bootstrap.servers": broker.address})
    for name, policy in ((compact, "compact"), (delete, "delete")):
        admin.create_topics([NewTopic(name, 1, 1, config={
            "cleanup.policy": policy, "retention.ms": "1"})])[name].result(20)
    history = [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", None)]  # None: a tombstone
    _produce(broker.address, compact, history)
    produce_all(broker.address, delete, [(b"k", b"v")] * 3, acks="all")
    _until(lambda: watermarks(broker.address, delete) == (3, 3),
           "retention to empty the delete topic")
    _retention_ran(broker.address, delete)
    assert watermarks(broker.address, compact) == (0, 4)
    assert _records(broker.address, compact, 4) == history  # every record, tombstone too
    assert _policy(admin, compact) == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)

    # delete added at run time: retention applies from the next pass
    _alter(admin, compact, AlterConfigOpType.APPEND, "delete")
    assert _policy(admin, compact) == ("compact,delete", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    _until(lambda: watermarks(broker.address, compact) == (4, 4),
           "retention to empty the compact,delete topic")
    # ... and taken away again: the new records stay, across a restart too
    _alter(admin, compact, AlterConfigOpType.SUBTRACT, "delete")
    assert _policy(admin, compact) == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    _produce(broker.address, compact, [(b"c", b"1")])
    broker.stop()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.address})
    _retention_ran(broker.address, delete)
    assert watermarks(broker.address, compact) == (4, 5)

    # the legacy alter replaces the whole set: the policy returns to its default, delete
    legacy = ConfigResource(ConfigResource.Type.TOPIC, compact, set_config={"retention.ms": "1"})
    admin.alter_configs([legacy])[legacy].result(20)
    assert _policy(admin, compact) == ("delete", ConfigSource.DEFAULT_CONFIG)
    _until(lambda: watermarks(broker.address, compact) == (5, 5),
           "retention to empty the topic back to delete")


# What Kafka Connect (its config, offset and status topics) and Kafka Streams (changelog,
# windowed changelog and repartition topics) ask CreateTopics for
FRAMEWORK_TOPICS = {
    "connect-configs": {"cleanup.policy": "compact"},
    "connect-offsets": {"cleanup.policy": "compact"},
    "connect-status": {"cleanup.policy": "compact"},
    "app-store-changelog": {"cleanup.policy": "compact", "message.timestamp.type": "CreateTime",
                            "min.compaction.lag.ms": "0", "delete.retention.ms": "86400000",
                            "min.cleanable.dirty.ratio": "0.1", "segment.bytes": "52428800"},
    "app-window-changelog": {"cleanup.policy": "compact,delete", "retention.ms": "172800000",
                             "message.timestamp.type": "CreateTime"},
    "app-repartition": {"cleanup.policy": "delete", "segment.bytes": "52428800",
                        "retention.ms": "-1", "message.timestamp.type": "CreateTime"},
}


def test_connect_and_streams_internal_topics(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.address})
    futures = admin.create_topics([NewTopic(name, 1, 1, config=configs)
                                   for name, configs in FRAMEWORK_TOPICS.items()])
    for future in futures.values():
        future.result(20)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in FRAMEWORK_TOPICS]
    described = {res.name: future.result(20)
                 for res, future in admin.describe_configs(resources).items()}
    for name, configs in FRAMEWORK_TOPICS.items():
        entries = described[name]
        assert {k: entries[k].value for k in configs} == configs, name
        assert {ConfigSource(entries[k].source) for k in configs} == {
            ConfigSource.DYNAMIC_TOPIC_CONFIG}
        # Kafka's defaults for what was not set
        assert (entries["max.compaction.lag.ms"].value, entries["preallocate"].value,
                entries["file.delete.delay.ms"].value) == (str(2**63 - 1), "false", "60000")
        assert ConfigSource(entries["flush.ms"].source) == ConfigSource.DEFAULT_CONFIG
        assert len(entries) == 28  # every config accepted (topic_configs.CONFIGS)
    # Connect refuses to start unless its topics' policy is exactly compact
    for name in ("connect-configs", "connect-offsets", "connect-status"):
        policy = described[name]["cleanup.policy"].value
        assert {p.strip().lower() for p in policy.split(",")} == {"compact"}


def test_kafka_python_creates_and_describes_a_compacted_topic(broker: BrokerProcess) -> None:
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        configs = {"cleanup.policy": "compact", "delete.retention.ms": "100",
                   "segment.jitter.ms": "10", "unclean.leader.election.enable": "false"}
        response = admin.create_topics([KpNewTopic("kp-compact", 1, 1, topic_configs=configs)],
                                       raise_errors=False)
        assert [(t["name"], t["error_code"]) for t in response["topics"]] == [("kp-compact", 0)]
        resource = KpConfigResource(ConfigResourceType.TOPIC, "kp-compact")
        modified = admin.describe_configs([resource])["topic"]["kp-compact"]
        every = admin.describe_configs([resource], config_filter="all")["topic"]["kp-compact"]
    finally:
        admin.close()
    assert {k: c["value"] for k, c in modified.items()} == configs  # the topic's own
    assert len(every) == 28 and every["delete.retention.ms"]["value"] == "100"


def test_a_compacted_topic_refuses_records_without_a_key(broker: BrokerProcess) -> None:
    """As Kafka's LogValidator: a compacted log is keyed, so a keyless record is
    INVALID_RECORD (the batch is stored neither compressed nor as produced), and
    DeleteRecords is POLICY_VIOLATION where retention does not apply either."""
    from confluent_kafka import KafkaError

    admin = AdminClient({"bootstrap.servers": broker.address})
    errors: list[Any] = []
    for topic, codec in (("keyed-plain", "producer"), ("keyed-zstd", "zstd")):
        admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact",
                                                           "compression.type": codec})])[topic].result(20)
        errors.clear()
        producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 0, "retries": 0})
        producer.produce(topic, value=b"no key", on_delivery=lambda err, _m: errors.append(err))
        producer.flush(20)
        assert len(errors) == 1 and errors[0] is not None, errors
        assert errors[0].code() == KafkaError.INVALID_RECORD, errors[0]
        assert produce_all(broker.address, topic, [(b"k", b"v")])[0][1] == 0  # nothing stored before
        result = admin.delete_records([TopicPartition(topic, 0, 1)])
        with pytest.raises(Exception, match="POLICY_VIOLATION"):
            next(iter(result.values())).result(20)
        assert watermarks(broker.address, topic, 0) == (0, 1)
