"""AlterConfigs and IncrementalAlterConfigs: Kafka's checks of each resource, the
incremental operations, and configs surviving a restart (partition 0's copy wins)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crossbeat.broker.codec import APIS
from crossbeat.broker.errors import ErrorCode
from tests.unit.broker.conftest import LoopBroker, call

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC, BROKER = 2, 4


def _create(sock: Any, name: str, partitions: int = 2) -> None:
    q = APIS[19].request
    resp = call(sock, q(version=4, topics=[q.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[],
        configs=[])], timeout_ms=1000, validate_only=False))
    assert resp.topics[0].error_code == 0


def _incremental(sock: Any, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
                 validate_only: bool = False) -> list[tuple[int, str | None]]:
    q = APIS[44].request
    res = q.AlterConfigsResource
    resp = call(sock, q(version=1, validate_only=validate_only, resources=[
        res(resource_type=t, resource_name=n, configs=[
            res.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in cs])
        for t, n, cs in resources]))
    return [(r.error_code, r.error_message) for r in resp.responses]


def _legacy(sock: Any, type_: int, name: str, configs: dict[str, str | None],
            validate_only: bool = False) -> tuple[int, str | None]:
    q = APIS[33].request
    res = q.AlterConfigsResource
    resp = call(sock, q(version=2, validate_only=validate_only, resources=[
        res(resource_type=type_, resource_name=name, configs=[
            res.AlterableConfig(name=k, value=v) for k, v in configs.items()])]))
    (r,) = resp.responses
    return r.error_code, r.error_message


def _explicit(sock: Any, name: str) -> dict[str, str]:
    q = APIS[32].request
    resp = call(sock, q(version=3, include_synonyms=False, include_documentation=False,
                        resources=[q.DescribeConfigsResource(
                            resource_type=TOPIC, resource_name=name, configuration_keys=None)]))
    return {c.name: c.value for c in resp.results[0].configs if c.config_source == 1}


def test_checks_and_operations(loop_broker: LoopBroker) -> None:
    with loop_broker.connect() as sock:
        _create(sock, "t")
        bad = ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_CONFIG
        assert _incremental(sock, [(TOPIC, "t", [("retention.ms", SET, "1000")]),
                                   (TOPIC, "t", [("retention.ms", SET, "2000")])]) == [
            (bad[0], "Each resource must appear at most once.")] * 2
        assert _incremental(sock, [(TOPIC, "t", [("retention.ms", SET, None)])]) == [
            (bad[0], "Null value not supported for : retention.ms")]
        assert _incremental(sock, [(TOPIC, "t", [("retention.ms", SET, "1"),
                                                 ("retention.ms", DELETE, None)])]) == [
            (bad[0], "Error due to duplicate config keys")]
        assert _incremental(sock, [(TOPIC, "t", [("retention.ms", 9, "1")])]) == [
            (bad[0], "Unknown operations type 9")]
        assert _incremental(sock, [(TOPIC, "t", [("retention.ms", APPEND, "1")])]) == [
            (bad[1], "Can't APPEND to key retention.ms because its type is not LIST.")]
        assert _incremental(sock, [(TOPIC, "t", [("retention.ms", SET, "-2")])]) == [
            (bad[1], "Invalid value -2 for configuration retention.ms: Value must be at least -1")]
        assert _incremental(sock, [(TOPIC, "t", [("cleanup.policy", APPEND, "Compact")])]) == [
            (bad[1], "Invalid value Compact for configuration cleanup.policy: String must be one "
                     "of: compact, delete")]
        assert _incremental(sock, [(TOPIC, "t", [("no.such", SET, "1")])])[0][0] == bad[1]
        assert _incremental(sock, [(TOPIC, "nope", [("retention.ms", SET, "1")])]) == [
            (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist.")]
        assert _incremental(sock, [(BROKER, "0", [("num.partitions", SET, "3")])]) == [
            (bad[0], "Cannot update these configs dynamically: Set(num.partitions)")]
        assert _incremental(sock, [(BROKER, "7", [("num.partitions", SET, "3")])])[0] == (
            bad[0], "Unexpected broker id, expected 0, but received 7")
        assert _incremental(sock, [(BROKER, "", [])]) == [(0, None)]  # changes nothing
        assert _incremental(sock, [(32, "g", [("x", SET, "3")])]) == [
            (bad[0], "Unknown resource type 32")]
        assert _explicit(sock, "t") == {}  # nothing above applied

        assert _incremental(sock, [(TOPIC, "t", [("retention.ms", SET, "5000")])],
                            validate_only=True) == [(0, None)]
        assert _explicit(sock, "t") == {}
        assert _incremental(sock, [(TOPIC, "t", [("retention.ms", SET, "5000"),
                                                 ("cleanup.policy", APPEND, "delete")])]) == [(0, None)]
        assert _explicit(sock, "t") == {"retention.ms": "5000", "cleanup.policy": "delete"}
        assert _incremental(sock, [(TOPIC, "t", [("cleanup.policy", APPEND, "compact")])]) == [
            (0, None)]
        assert _explicit(sock, "t") == {"retention.ms": "5000", "cleanup.policy": "delete,compact"}
        # the last item subtracted leaves an empty list, which Kafka accepts (keep forever)
        assert _incremental(sock, [(TOPIC, "t", [("cleanup.policy", SUBTRACT, "delete,compact")])]) == [
            (0, None)]
        assert _explicit(sock, "t") == {"retention.ms": "5000", "cleanup.policy": ""}
        assert _incremental(sock, [(TOPIC, "t", [("retention.ms", DELETE, None),
                                                 ("cleanup.policy", SET, "delete"),
                                                 ("segment.ms", SET, "60000")])]) == [(0, None)]
        assert _explicit(sock, "t") == {"cleanup.policy": "delete", "segment.ms": "60000"}

        # legacy: the given set replaces all explicit configs
        assert _legacy(sock, TOPIC, "t", {"retention.ms": None}) == (
            bad[0], "Null value not supported for : retention.ms")
        assert _legacy(sock, TOPIC, "t", {"max.message.bytes": "-1"})[0] == bad[1]
        assert _legacy(sock, TOPIC, "t", {"max.message.bytes": "1000"}, validate_only=True) == (0, None)
        assert _explicit(sock, "t") == {"cleanup.policy": "delete", "segment.ms": "60000"}
        assert _legacy(sock, TOPIC, "t", {"max.message.bytes": "1000"}) == (0, None)
        assert _explicit(sock, "t") == {"max.message.bytes": "1000"}
        assert _legacy(sock, BROKER, "", {"num.partitions": "3"}) == (
            bad[0], "Node id must be an integer, but it is: ")


def test_configs_survive_restart_and_an_interrupted_alter(tmp_path: Path) -> None:
    from crossbeat.stream.placement import PlacementDriver

    placement_file = tmp_path / "data" / "streams" / "placement.json"
    broker = LoopBroker(tmp_path / "data").start()
    try:
        with broker.connect() as sock:
            _create(sock, "t", partitions=3)
            assert _incremental(sock, [(TOPIC, "t", [("retention.ms", SET, "5000")])]) == [(0, None)]
    finally:
        broker.close()
    placement = PlacementDriver(placement_file)
    assert {placement.get(f"t-{i}").config["retention.ms"] for i in range(3)} == {"5000"}
    # a crash after partition 0 took a new alter but before the others did
    placement.update_config("t-0", {**placement.get("t-0").config, "retention.ms": "7000"})
    broker = LoopBroker(tmp_path / "data").start()
    try:
        with broker.connect() as sock:
            assert _explicit(sock, "t") == {"retention.ms": "7000"}
    finally:
        broker.close()
    placement = PlacementDriver(placement_file)
    assert {placement.get(f"t-{i}").config["retention.ms"] for i in range(3)} == {"7000"}
