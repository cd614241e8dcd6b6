"""DescribeConfigs on the wire: sources (the topic's override, a broker setting the operator
set, Kafka's default), synonyms most specific first, config types and documentation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crossbeat.broker.codec import APIS
from crossbeat.stream import StreamSettings
from tests.unit.broker.conftest import LoopBroker, call

TOPIC, BROKER = 2, 4
LONG, INT, LIST = 5, 3, 7


def _describe(sock: Any, version: int, type_: int, name: str, *, synonyms: bool = False,
              docs: bool = False) -> dict[str, Any]:
    q = APIS[32].request
    resp = call(sock, q(version=version, include_synonyms=synonyms, include_documentation=docs,
                        resources=[q.DescribeConfigsResource(
                            resource_type=type_, resource_name=name, configuration_keys=None)]))
    (result,) = resp.results
    assert result.error_code == 0
    return {c.name: c for c in result.configs}


def test_sources_synonyms_types_and_documentation(tmp_path: Path) -> None:
    # retention set by the operator; segment.ms left at its default, overridden by the topic
    broker = LoopBroker(tmp_path / "data", stream=StreamSettings(retention_ms=3_600_000)).start()
    try:
        with broker.connect() as sock:
            q = APIS[19].request
            resp = call(sock, q(version=4, topics=[q.CreatableTopic(
                name="t", num_partitions=1, replication_factor=1, assignments=[],
                configs=[q.CreatableTopic.CreatableTopicConfig(name="segment.ms", value="1000")])],
                timeout_ms=1000, validate_only=False))
            assert resp.topics[0].error_code == 0

            configs = _describe(sock, 3, TOPIC, "t", synonyms=True, docs=True)
            seg = configs["segment.ms"]
            assert (seg.value, seg.config_source, seg.config_type) == ("1000", 1, LONG)
            assert [(s.name, s.value, s.source) for s in seg.synonyms] == [
                ("segment.ms", "1000", 1), ("log.roll.ms", str(7 * 24 * 3600 * 1000), 5)]
            assert seg.documentation
            retention = configs["retention.ms"]
            assert (retention.value, retention.config_source) == ("3600000", 4)
            assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
                ("log.retention.ms", "3600000", 4)]
            policy = configs["cleanup.policy"]
            assert (policy.config_source, policy.config_type) == (5, LIST)
            # Kafka's defaults: what neither the topic nor the operator set
            v1 = _describe(sock, 1, TOPIC, "t")
            assert {k for k, c in v1.items() if c.config_source == 5} == {
                "cleanup.policy", "compression.type", "max.message.bytes",
                "message.timestamp.type", "min.insync.replicas", "retention.bytes",
                "segment.bytes", "delete.retention.ms", "min.compaction.lag.ms",
                "max.compaction.lag.ms", "min.cleanable.dirty.ratio", "segment.index.bytes",
                "segment.jitter.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
                "index.interval.bytes", "preallocate", "unclean.leader.election.enable",
                "message.downconversion.enable", "leader.replication.throttled.replicas",
                "follower.replication.throttled.replicas", "remote.storage.enable",
                "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
                "message.timestamp.difference.max.ms"}

            plain = _describe(sock, 3, TOPIC, "t")  # neither asked for
            assert plain["segment.ms"].synonyms == [] and plain["segment.ms"].documentation is None
            assert _describe(sock, 1, TOPIC, "t")["segment.ms"].synonyms == []

            own = _describe(sock, 3, BROKER, "0", synonyms=True)
            assert (own["broker.id"].config_type, own["broker.id"].read_only) == (INT, True)
            assert [(s.name, s.source) for s in own["message.max.bytes"].synonyms] == [
                ("message.max.bytes", 4)]
    finally:
        broker.close()
