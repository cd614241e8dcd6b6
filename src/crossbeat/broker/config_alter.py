"""What AlterConfigs (33) and IncrementalAlterConfigs (44) do to one resource, shared by
both handlers: Kafka's checks of a resource before it is applied (`ConfigAdminManager`'s
preprocessing and the controller's), each with Kafka's error code and message, and the
incremental operations turned into the topic's new explicit configs.

Only topics can be altered. A broker resource names configs this broker fixes at start
(none is dynamic here), so it is refused as Kafka refuses a read-only broker config:
INVALID_REQUEST, "Cannot update these configs dynamically: Set(...)".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.topic_configs import LIST_CONFIGS
from crossbeat.broker.topics import TopicError

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def _invalid(message: str) -> TopicError:
    return TopicError(ErrorCode.INVALID_REQUEST, message)


def duplicate_resources(resources: Iterable[Any]) -> set[tuple[int, str]]:
    """(type, name) of every resource given more than once: Kafka answers each copy
    INVALID_REQUEST "Each resource must appear at most once." and applies none."""
    seen: set[tuple[int, str]] = set()
    twice: set[tuple[int, str]] = set()
    for r in resources:
        key = (r.resource_type, r.resource_name)
        (twice if key in seen else seen).add(key)
    return twice


def check_resource(resource: Any, node_id: int, *, incremental: bool) -> None:
    """Raise TopicError for a resource Kafka refuses before looking at the topic: a null
    value (except in an incremental DELETE), a config named twice, an unknown operation,
    a resource type other than topic or broker, and a broker resource naming any config
    (one naming none changes nothing and passes, as in Kafka)."""
    ops = [getattr(c, "config_operation", SET) for c in resource.configs]
    nulls = [c.name for c, op in zip(resource.configs, ops, strict=True)
             if c.value is None and not (incremental and op == DELETE)]
    if resource.resource_type == BROKER:
        _check_broker_name(resource.resource_name, node_id, allow_default=incremental)
    elif resource.resource_type != TOPIC:
        raise _invalid(f"Unknown resource type {resource.resource_type}")
    if nulls:
        raise _invalid(f"Null value not supported for : {', '.join(nulls)}")
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise _invalid("Error due to duplicate config keys")
    unknown = next((op for op in ops if op not in _OP_NAMES), None)
    if unknown is not None:
        raise _invalid(f"Unknown operations type {unknown}")
    if resource.resource_type == BROKER and names:
        raise _invalid(f"Cannot update these configs dynamically: Set({', '.join(names)})")


def _check_broker_name(name: str, node_id: int, *, allow_default: bool) -> None:
    if allow_default and name == "":  # the cluster-wide default resource
        return
    try:
        number = int(name)
    except ValueError:
        raise _invalid(f"Node id must be an integer, but it is: {name}") from None
    if number != node_id:
        raise _invalid(f"Unexpected broker id, expected {node_id}, but received {name}")


def incremental_configs(current: dict[str, str], defaults: dict[str, str],
                        ops: Iterable[Any]) -> dict[str, str]:
    """The explicit configs after applying `ops` (SET, DELETE, APPEND, SUBTRACT) to
    `current`, not yet checked. APPEND/SUBTRACT on a config that is not a list is
    TopicError(INVALID_CONFIG) with Kafka's message; a list's items are comma-separated,
    an unset list starts from its default (as in Kafka), APPEND skips items already
    present, and SUBTRACT of the last item leaves an empty value (which the config
    check then judges: an empty `cleanup.policy` is valid, and keeps every record).
    The lists are `topic_configs.LIST_CONFIGS`: `cleanup.policy` and the replication
    throttles."""
    configs = dict(current)
    for c in ops:
        op = c.config_operation
        if op == SET:
            configs[c.name] = c.value
        elif op == DELETE:
            configs.pop(c.name, None)
        else:
            if c.name not in LIST_CONFIGS:
                raise TopicError(ErrorCode.INVALID_CONFIG, f"Can't {_OP_NAMES[op]} to key "
                                 f"{c.name} because its type is not LIST.")
            old = configs.get(c.name, defaults.get(c.name, ""))
            items = [v for v in old.split(",") if v]
            given = [v for v in c.value.split(",") if v]
            if op == APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            configs[c.name] = ",".join(items)
    return configs


def alter_each(
    resources: list[Any], node_id: int, *, incremental: bool, apply: Callable[[Any], None],
    result: Callable[..., Any],
) -> list[Any]:
    """One `result(error_code, error_message, resource_type, resource_name)` per resource, in
    request order: a resource named twice is INVALID_REQUEST, each is checked
    (`check_resource`), then `apply(resource)` alters a topic (a broker resource that passes
    its checks changes nothing). A TopicError fails that resource alone."""
    twice = duplicate_resources(resources)
    results = []
    for res in resources:
        code, message = ErrorCode.NONE, None
        try:
            if (res.resource_type, res.resource_name) in twice:
                raise TopicError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            check_resource(res, node_id, incremental=incremental)
            if res.resource_type == TOPIC:
                apply(res)
        except TopicError as exc:
            code, message = exc.code, exc.message
        results.append(result(error_code=int(code), error_message=message,
                              resource_type=res.resource_type, resource_name=res.resource_name))
    return results
