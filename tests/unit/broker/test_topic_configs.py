"""The standard Kafka topic configs on the wire: CreateTopics accepts `cleanup.policy`'s list
values and the configs that only tune Kafka's own broker, checked with Kafka's types, bounds
and messages; refuses what it would silently break; stores values as Kafka describes them;
DescribeConfigs reports every accepted config with Kafka's default, source, type, synonym
and documentation; the alters take list operations on the new lists."""

from __future__ import annotations

from typing import Any

import pytest

from crossbeat.broker.codec import APIS
from crossbeat.broker.errors import ErrorCode
from tests.unit.broker.conftest import LoopBroker, call
from tests.unit.broker.test_alter_configs import APPEND, SET, SUBTRACT, TOPIC, _incremental

BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
LONG_MAX = str(2**63 - 1)


def _create(sock: Any, name: str, configs: dict[str, str], *,
            validate_only: bool = False) -> tuple[int, str | None]:
    q = APIS[19].request
    resp = call(sock, q(version=4, topics=[q.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=[],
        configs=[q.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                 for k, v in configs.items()])],
        timeout_ms=1000, validate_only=validate_only))
    (result,) = resp.topics
    return result.error_code, result.error_message


def _describe(sock: Any, name: str) -> dict[str, Any]:
    q = APIS[32].request
    resp = call(sock, q(version=3, include_synonyms=True, include_documentation=True,
                        resources=[q.DescribeConfigsResource(
                            resource_type=TOPIC, resource_name=name, configuration_keys=None)]))
    (result,) = resp.results
    assert result.error_code == 0
    return {c.name: c for c in result.configs}


# Kafka's LogConfig: name -> (default, ConfigType, broker synonym or None)
KAFKA_DEFAULTS = {
    "delete.retention.ms": ("86400000", LONG, "log.cleaner.delete.retention.ms"),
    "min.compaction.lag.ms": ("0", LONG, "log.cleaner.min.compaction.lag.ms"),
    "max.compaction.lag.ms": (LONG_MAX, LONG, "log.cleaner.max.compaction.lag.ms"),
    "min.cleanable.dirty.ratio": ("0.5", DOUBLE, "log.cleaner.min.cleanable.ratio"),
    "segment.index.bytes": ("10485760", INT, "log.index.size.max.bytes"),
    "segment.jitter.ms": ("0", LONG, "log.roll.jitter.ms"),
    "file.delete.delay.ms": ("60000", LONG, "log.segment.delete.delay.ms"),
    "flush.messages": (LONG_MAX, LONG, "log.flush.interval.messages"),
    "flush.ms": (LONG_MAX, LONG, "log.flush.interval.ms"),
    "index.interval.bytes": ("4096", INT, "log.index.interval.bytes"),
    "preallocate": ("false", BOOLEAN, "log.preallocate"),
    "unclean.leader.election.enable": ("false", BOOLEAN, "unclean.leader.election.enable"),
    "message.downconversion.enable": ("true", BOOLEAN, "log.message.downconversion.enable"),
    "leader.replication.throttled.replicas": ("", LIST, None),
    "follower.replication.throttled.replicas": ("", LIST, None),
    "remote.storage.enable": ("false", BOOLEAN, None),
    "cleanup.policy": ("delete", LIST, "log.cleanup.policy"),
    # Kafka 3.x's defaults (4.0 bounds `after` to an hour; see topic_configs)
    "message.timestamp.before.max.ms": (LONG_MAX, LONG, "log.message.timestamp.before.max.ms"),
    "message.timestamp.after.max.ms": (LONG_MAX, LONG, "log.message.timestamp.after.max.ms"),
    "message.timestamp.difference.max.ms": (LONG_MAX, LONG, "log.message.timestamp.difference.max.ms"),
}


def test_every_accepted_config_is_described_with_kafkas_default(loop_broker: LoopBroker) -> None:
    with loop_broker.connect() as sock:
        assert _create(sock, "t", {}) == (0, None)
        described = _describe(sock, "t")
    for key, (default, kind, synonym) in KAFKA_DEFAULTS.items():
        entry = described[key]
        assert (entry.value, entry.config_source, entry.config_type) == (default, 5, kind), key
        assert not entry.read_only and entry.documentation, key
        expected = [] if synonym is None else [(synonym, default, 5)]
        assert [(s.name, s.value, s.source) for s in entry.synonyms] == expected, key


def test_values_are_stored_as_kafka_describes_them(loop_broker: LoopBroker) -> None:
    given = {
        "cleanup.policy": " compact , delete ", "delete.retention.ms": "+100",
        "min.compaction.lag.ms": "5", "max.compaction.lag.ms": "10",
        "min.cleanable.dirty.ratio": "1e-4", "segment.index.bytes": "4",
        "segment.jitter.ms": "0", "file.delete.delay.ms": "0", "flush.messages": "1",
        "flush.ms": "0", "index.interval.bytes": "0", "preallocate": "TRUE",
        "unclean.leader.election.enable": " True", "message.downconversion.enable": "false",
        "leader.replication.throttled.replicas": "0:0, 1:0",
        "follower.replication.throttled.replicas": "*", "remote.storage.enable": "False",
    }
    stored = {
        **given, "cleanup.policy": "compact,delete", "delete.retention.ms": "100",
        "min.cleanable.dirty.ratio": "1.0E-4",  # Java's Double.toString
        "preallocate": "true", "unclean.leader.election.enable": "true",
        "leader.replication.throttled.replicas": "0:0,1:0", "remote.storage.enable": "false",
    }
    with loop_broker.connect() as sock:
        assert _create(sock, "t", given) == (0, None)
        described = _describe(sock, "t")
        assert {k: described[k].value for k in given} == stored
        assert {described[k].config_source for k in given} == {1}
        assert [(s.name, s.value, s.source) for s in described["cleanup.policy"].synonyms] == [
            ("cleanup.policy", "compact,delete", 1), ("log.cleanup.policy", "delete", 5)]
        # an empty policy is a valid list (Kafka: keep everything)
        assert _create(sock, "empty", {"cleanup.policy": ""}) == (0, None)
        assert _describe(sock, "empty")["cleanup.policy"].value == ""


@pytest.mark.parametrize(("key", "value", "message"), [
    ("cleanup.policy", "bogus", "Invalid value bogus for configuration cleanup.policy: "
                                "String must be one of: compact, delete"),
    ("cleanup.policy", "Compact", "Invalid value Compact for configuration cleanup.policy: "
                                  "String must be one of: compact, delete"),
    ("cleanup.policy", "compact,", "Invalid value  for configuration cleanup.policy: "
                                   "String must be one of: compact, delete"),
    ("delete.retention.ms", "-1", "Invalid value -1 for configuration delete.retention.ms: "
                                  "Value must be at least 0"),
    ("delete.retention.ms", "1d", "Invalid value 1d for configuration delete.retention.ms: "
                                  "Not a number of type LONG"),
    ("max.compaction.lag.ms", "0", "Invalid value 0 for configuration max.compaction.lag.ms: "
                                   "Value must be at least 1"),
    ("min.cleanable.dirty.ratio", "1.5", "Invalid value 1.5 for configuration "
                                         "min.cleanable.dirty.ratio: Value must be no more than 1"),
    ("min.cleanable.dirty.ratio", "2", "Invalid value 2.0 for configuration "
                                       "min.cleanable.dirty.ratio: Value must be no more than 1"),
    ("min.cleanable.dirty.ratio", "half", "Invalid value half for configuration "
                                          "min.cleanable.dirty.ratio: Not a number of type DOUBLE"),
    ("segment.index.bytes", "3", "Invalid value 3 for configuration segment.index.bytes: "
                                 "Value must be at least 4"),
    ("segment.index.bytes", "2147483648", "Invalid value 2147483648 for configuration "
                                          "segment.index.bytes: Not a number of type INT"),
    ("flush.messages", "0", "Invalid value 0 for configuration flush.messages: "
                            "Value must be at least 1"),
    ("preallocate", "yes", "Invalid value yes for configuration preallocate: "
                           "Expected value to be either true or false"),
    ("leader.replication.throttled.replicas", "0:0,x",
     "Invalid value [0:0, x] for configuration leader.replication.throttled.replicas: "
     "leader.replication.throttled.replicas must be the literal '*' or a list of replicas in "
     "the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."),
    ("message.timestamp.type", "createtime", "Invalid value createtime for configuration "
                                             "message.timestamp.type: String must be one of: "
                                             "CreateTime, LogAppendTime"),
    # tiered storage: Kafka's answer on a broker without it
    ("remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker. "
                                      "Topic cannot be configured with remote log storage."),
    ("no.such.config", "1", "Unknown topic config name: no.such.config"),
    # Kafka's, but refused: the codecs here use their default levels
    ("compression.zstd.level", "3", "Topic config compression.zstd.level is not supported by "
                                    "this broker: the codecs here use their default levels"),
    ("message.timestamp.after.max.ms", "-1", "Invalid value -1 for configuration "
                                             "message.timestamp.after.max.ms: Value must be at "
                                             "least 0"),
])
def test_invalid_values_are_refused_with_kafkas_messages(
        loop_broker: LoopBroker, key: str, value: str, message: str) -> None:
    with loop_broker.connect() as sock:
        assert _create(sock, "t", {key: value}, validate_only=True) == (
            ErrorCode.INVALID_CONFIG, message)
        assert _create(sock, "t", {key: value}) == (ErrorCode.INVALID_CONFIG, message)


def test_compaction_lags_are_checked_together(loop_broker: LoopBroker) -> None:
    conflict = (ErrorCode.INVALID_CONFIG, "conflict topic config setting min.compaction.lag.ms "
                "(10) > max.compaction.lag.ms (5)")
    with loop_broker.connect() as sock:
        assert _create(sock, "t", {"min.compaction.lag.ms": "10",
                                   "max.compaction.lag.ms": "5"}) == conflict
        assert _create(sock, "t", {"max.compaction.lag.ms": "10"}) == (0, None)
        # the minimum's default (0) is below any maximum; a later alter is checked against
        # the topic's maximum
        assert _incremental(sock, [(TOPIC, "t", [("max.compaction.lag.ms", SET, "5"),
                                                 ("min.compaction.lag.ms", SET, "10")])]) == [
            conflict]
        assert _incremental(sock, [(TOPIC, "t", [("min.compaction.lag.ms", SET, "10")])]) == [
            (0, None)]


def test_list_operations_on_the_throttled_replicas(loop_broker: LoopBroker) -> None:
    key = "follower.replication.throttled.replicas"
    with loop_broker.connect() as sock:
        assert _create(sock, "t", {}) == (0, None)
        assert _incremental(sock, [(TOPIC, "t", [(key, APPEND, "0:0,1:0")])]) == [(0, None)]
        assert _incremental(sock, [(TOPIC, "t", [(key, APPEND, "1:0,2:0")])]) == [(0, None)]
        assert _describe(sock, "t")[key].value == "0:0,1:0,2:0"
        assert _incremental(sock, [(TOPIC, "t", [(key, SUBTRACT, "1:0")])]) == [(0, None)]
        assert _describe(sock, "t")[key].value == "0:0,2:0"
        assert _incremental(sock, [(TOPIC, "t", [("preallocate", APPEND, "true")])]) == [
            (ErrorCode.INVALID_CONFIG, "Can't APPEND to key preallocate because its type is not "
                                       "LIST.")]
