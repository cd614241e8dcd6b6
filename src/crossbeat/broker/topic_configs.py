"""Every topic config we accept, with Kafka's type, default, bounds, messages and broker
synonym (`LogConfig` and `ServerTopicConfigSynonyms`, Kafka 3.x/4.0), and how a value is
checked and written down.

What we accept falls in three groups:

- configs applied here: `cleanup.policy`, `retention.ms`, `retention.bytes`, `segment.bytes`,
  `segment.ms`, `max.message.bytes`, `min.insync.replicas`, `message.timestamp.type`,
  `compression.type`, and the bounds on a CreateTime record's timestamp
  `message.timestamp.before.max.ms` / `after.max.ms` (KIP-937; and 3.x's deprecated
  `message.timestamp.difference.max.ms`, which stands for either one left unset, as in
  Kafka 3.6+), with Kafka 3.x's defaults: unbounded (Kafka 4.0 bounds `after` to an hour by
  default, which would refuse what producers wrote here before);
- configs that only tune how Kafka's broker does its work, with no effect on what clients
  can write or read here (a single node that fsyncs every batch before answering, runs no
  log cleaner and never down-converts): the compaction knobs, flush, index, preallocation,
  file deletion delay, segment jitter, unclean leader election, replication throttles and
  `message.downconversion.enable` (3.x; Fetch below v4, the only one it concerns, is not
  served);
- `remote.storage.enable`, whose only accepted value is `false`: `true` is refused as Kafka
  refuses it on a broker without tiered storage.

`cleanup.policy` is a list of `delete` and `compact` (either order, both, or neither: an
empty list, which Kafka accepts too and which keeps records forever). No log cleaner runs
here, so a `compact` topic keeps every record, tombstones included: Kafka promises only that
at least the latest value of each key is kept and never that compaction has run, so a reader
sees a state a compacted log may have. Without `delete` in the policy, `retention.ms` and
`retention.bytes` delete nothing, as in Kafka (`StreamLimits.resolve`).

Refused, since accepting them would silently change what is accepted or kept: the
compression levels (the codecs here use their own), `local.retention.*` and the other
tiered-storage configs, and `message.format.version`. A name Kafka does not know is refused with Kafka's message.

Bounds are Kafka's: `segment.bytes` at least 1 MiB — Kafka 4.0's minimum (KIP-1030; 3.x
allowed 14 bytes). We take 4.0's because the stream store never rolls a segment below 1 KiB
(`StreamLimits.resolve` raises smaller sizes), so a smaller value would be accepted and
reported but not honoured. INT configs must fit 32 bits, LONG ones 64. `compression.type`
and `message.timestamp.type` take Kafka's names exactly (case matters, as in Kafka's
validator); BOOLEAN values are `true` or `false` in any case. A value is stored as Kafka
describes it once parsed: numbers in plain decimal, booleans in lower case, lists joined by
"," without spaces, a DOUBLE as Java prints it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal

INT, LONG, DOUBLE, BOOLEAN, STRING, LIST = "INT", "LONG", "DOUBLE", "BOOLEAN", "STRING", "LIST"
_RANGE = {INT: (-(2**31), 2**31 - 1), LONG: (-(2**63), 2**63 - 1)}
_NUMBER = re.compile(r"[+-]?[0-9]+")  # what Java's Integer/Long.parseLong take, once trimmed
# what Java's Double.parseDouble takes, but for hex and NaN (NaN passes Kafka's range check
# and means nothing for a ratio: refused here)
_DOUBLE = re.compile(r"[+-]?(Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)")
_LIST_SEPARATOR = re.compile(r"\s*,\s*", re.ASCII)  # ConfigDef's COMMA_WITH_WHITESPACE
_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")
_JAVA_TRIMMED = "".join(chr(c) for c in range(33))  # String.trim(): every char <= ' '
LONG_MAX = str(2**63 - 1)
MIN_SEGMENT_BYTES = 1024 * 1024


class InvalidConfig(ValueError):
    """A config name or value refused, with the message Kafka gives (INVALID_CONFIG)."""


@dataclass(frozen=True)
class ConfigSpec:
    """One accepted topic config. `default` is Kafka's, or None where the broker's settings
    give it (`topics.default_configs`); `synonym` is the broker config Kafka names as its
    source when the topic does not set it (None: it has none)."""

    kind: str
    default: str | None
    synonym: str | None
    doc: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()


_NO_EFFECT = "Accepted as in Kafka; no effect here"
CONFIGS: dict[str, ConfigSpec] = {
    "cleanup.policy": ConfigSpec(
        LIST, "delete", "log.cleanup.policy",
        "delete: retention.ms/bytes remove old segments; compact: records are kept for "
        "compaction, which never runs here, so every record stays; both: retention applies.",
        choices=("compact", "delete")),
    "retention.ms": ConfigSpec(
        LONG, None, "log.retention.ms", "How long a segment is kept after its newest record; "
        "-1: no time limit. Only with delete in cleanup.policy.", minimum=-1),
    "retention.bytes": ConfigSpec(
        LONG, None, "log.retention.bytes", "The most bytes a partition keeps before old "
        "segments go; -1: no limit. Only with delete in cleanup.policy.", minimum=-1),
    "segment.bytes": ConfigSpec(INT, None, "log.segment.bytes",
                                "The size at which a segment is rolled.",
                                minimum=MIN_SEGMENT_BYTES),
    "segment.ms": ConfigSpec(LONG, None, "log.roll.ms",
                             "The age at which a segment is rolled, full or not.", minimum=1),
    "message.timestamp.type": ConfigSpec(
        STRING, "CreateTime", "log.message.timestamp.type",
        "CreateTime (the producer's) or LogAppendTime (the broker's).",
        choices=("CreateTime", "LogAppendTime")),
    "message.timestamp.before.max.ms": ConfigSpec(
        LONG, LONG_MAX, "log.message.timestamp.before.max.ms",
        "How far behind the broker's clock a CreateTime record's timestamp may be "
        "(INVALID_TIMESTAMP past it).", minimum=0),
    "message.timestamp.after.max.ms": ConfigSpec(
        LONG, LONG_MAX, "log.message.timestamp.after.max.ms",
        "How far ahead of the broker's clock a CreateTime record's timestamp may be "
        "(INVALID_TIMESTAMP past it).", minimum=0),
    "message.timestamp.difference.max.ms": ConfigSpec(
        LONG, LONG_MAX, "log.message.timestamp.difference.max.ms",
        "Deprecated (Kafka 3.6): the bound of message.timestamp.before.max.ms and "
        "after.max.ms where those are not set.", minimum=0),
    "max.message.bytes": ConfigSpec(INT, None, "message.max.bytes",
                                    "The largest record batch the topic accepts, after "
                                    "compression.", minimum=0),
    "min.insync.replicas": ConfigSpec(INT, "1", "min.insync.replicas",
                                      "The replicas that must have a batch for acks=all to "
                                      "succeed (this node is the only one).", minimum=1),
    "compression.type": ConfigSpec(
        STRING, "producer", "compression.type",
        "The codec batches are stored in; producer: as produced.",
        # Kafka's BrokerCompressionType names, in its order (the message lists them so)
        choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    "delete.retention.ms": ConfigSpec(
        LONG, "86400000", "log.cleaner.delete.retention.ms",
        f"How long the cleaner keeps tombstones. {_NO_EFFECT}: no cleaner runs, tombstones "
        "are kept.", minimum=0),
    "min.compaction.lag.ms": ConfigSpec(
        LONG, "0", "log.cleaner.min.compaction.lag.ms",
        f"The least age of a record before compaction. {_NO_EFFECT}: nothing is compacted.",
        minimum=0),
    "max.compaction.lag.ms": ConfigSpec(
        LONG, LONG_MAX, "log.cleaner.max.compaction.lag.ms",
        f"The most age of a record before compaction. {_NO_EFFECT}: nothing is compacted.",
        minimum=1),
    "min.cleanable.dirty.ratio": ConfigSpec(
        DOUBLE, "0.5", "log.cleaner.min.cleanable.ratio",
        f"The dirty share of a log that makes the cleaner run. {_NO_EFFECT}.",
        minimum=0, maximum=1),
    "segment.index.bytes": ConfigSpec(INT, "10485760", "log.index.size.max.bytes",
                                      f"The size of a segment's offset index. {_NO_EFFECT}.",
                                      minimum=4),
    "segment.jitter.ms": ConfigSpec(LONG, "0", "log.roll.jitter.ms",
                                    f"Random jitter on segment.ms. {_NO_EFFECT}.", minimum=0),
    "file.delete.delay.ms": ConfigSpec(
        LONG, "60000", "log.segment.delete.delay.ms",
        f"How long a deleted segment's file lingers. {_NO_EFFECT}: files go at once.",
        minimum=0),
    "flush.messages": ConfigSpec(
        LONG, LONG_MAX, "log.flush.interval.messages",
        f"Records between forced fsyncs. {_NO_EFFECT}: every batch is fsynced before it is "
        "acknowledged.", minimum=1),
    "flush.ms": ConfigSpec(
        LONG, LONG_MAX, "log.flush.interval.ms",
        f"Time between forced fsyncs. {_NO_EFFECT}: every batch is fsynced before it is "
        "acknowledged.", minimum=0),
    "index.interval.bytes": ConfigSpec(INT, "4096", "log.index.interval.bytes",
                                       f"Bytes between offset index entries. {_NO_EFFECT}.",
                                       minimum=0),
    "preallocate": ConfigSpec(BOOLEAN, "false", "log.preallocate",
                              f"Preallocate segment files. {_NO_EFFECT}."),
    "unclean.leader.election.enable": ConfigSpec(
        BOOLEAN, "false", "unclean.leader.election.enable",
        f"Let an out-of-sync replica lead. {_NO_EFFECT}: one node, one replica."),
    "message.downconversion.enable": ConfigSpec(
        BOOLEAN, "true", "log.message.downconversion.enable",
        f"Down-convert batches for old consumers. {_NO_EFFECT}: Fetch below v4 is not "
        "served, so none is needed."),
    "leader.replication.throttled.replicas": ConfigSpec(
        LIST, "", None,
        f"Replicas throttled on the leader side. {_NO_EFFECT}: nothing replicates."),
    "follower.replication.throttled.replicas": ConfigSpec(
        LIST, "", None,
        f"Replicas throttled on the follower side. {_NO_EFFECT}: nothing replicates."),
    "remote.storage.enable": ConfigSpec(
        BOOLEAN, "false", None,
        "Tiered storage; not available on this broker, so only false is accepted."),
}
"""Topic config -> its spec: the configs we accept on CreateTopics and the alters, and
report in DescribeConfigs."""

LIST_CONFIGS = frozenset(k for k, spec in CONFIGS.items() if spec.kind == LIST)
"""Configs of Kafka's LIST type, the only ones APPEND and SUBTRACT apply to."""

_REFUSED = {
    "compression.gzip.level": "the codecs here use their default levels",
    "compression.lz4.level": "the codecs here use their default levels",
    "compression.zstd.level": "the codecs here use their default levels",
    "local.retention.ms": "tiered storage is not available",
    "local.retention.bytes": "tiered storage is not available",
    "remote.log.copy.disable": "tiered storage is not available",
    "remote.log.delete.on.disable": "tiered storage is not available",
    "message.format.version": "only the v2 record format is stored",
}
"""Kafka topic configs refused because accepting them would silently change what is
accepted or kept -> why."""


def _invalid(key: str, shown: str, why: str) -> InvalidConfig:
    return InvalidConfig(f"Invalid value {shown} for configuration {key}: {why}")


def _java_double(value: float) -> str:
    """`value` as Java's Double.toString prints it (the shortest digits that read back)."""
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)  # plain decimal, with a '.', as Java's
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    fraction = text[1:] or "0"
    return f"{'-' if sign else ''}{text[0]}.{fraction}E{exponent + len(text) - 1}"


def _check_range(key: str, number: float, shown: str, spec: ConfigSpec) -> str:
    """`shown` (the parsed value as Java prints it, which Kafka's message quotes) if
    `number` is within the spec's bounds."""
    if spec.minimum is not None and number < spec.minimum:
        raise _invalid(key, shown, f"Value must be at least {spec.minimum}")
    if spec.maximum is not None and number > spec.maximum:
        raise _invalid(key, shown, f"Value must be no more than {spec.maximum}")
    return shown


def _list_items(value: str) -> list[str]:
    """A LIST value's items, as ConfigDef parses them (empty string: no items)."""
    trimmed = value.strip(_JAVA_TRIMMED)
    return _LIST_SEPARATOR.split(trimmed) if trimmed else []


def check_name(key: str) -> ConfigSpec:
    """The spec of topic config `key`; raises InvalidConfig for a name not accepted here
    (Kafka's message for a name Kafka does not know either)."""
    spec = CONFIGS.get(key)
    if spec is None:
        if key in _REFUSED:
            raise InvalidConfig(f"Topic config {key} is not supported by this broker: "
                                f"{_REFUSED[key]}")
        raise InvalidConfig(f"Unknown topic config name: {key}")
    return spec


def check_value(key: str, value: str) -> str:
    """The value of topic config `key` as it is stored and described; raises InvalidConfig
    with Kafka's message for a name not accepted here or a value Kafka would refuse."""
    spec = check_name(key)
    if spec.kind in (INT, LONG):
        text = value.strip()
        low, high = _RANGE[spec.kind]
        if not _NUMBER.fullmatch(text) or not low <= int(text) <= high:
            raise _invalid(key, value, f"Not a number of type {spec.kind}")
        return _check_range(key, int(text), str(int(text)), spec)
    if spec.kind == DOUBLE:
        text = value.strip(_JAVA_TRIMMED)
        if not _DOUBLE.fullmatch(text):
            raise _invalid(key, value, "Not a number of type DOUBLE")
        number = float(text.rstrip("fFdD"))
        return _check_range(key, number, _java_double(number), spec)
    if spec.kind == BOOLEAN:
        text = value.strip(_JAVA_TRIMMED).lower()
        if text not in ("true", "false"):
            raise _invalid(key, value, "Expected value to be either true or false")
        if key == "remote.storage.enable" and text == "true":
            # Kafka's answer on a broker without remote.log.storage.system.enable
            raise InvalidConfig("Tiered Storage functionality is disabled in the broker. "
                                "Topic cannot be configured with remote log storage.")
        return text
    if spec.kind == LIST:
        items = _list_items(value)
        if spec.choices:  # Kafka's ValidList: each item one of the choices, case and all
            bad = next((item for item in items if item not in spec.choices), None)
            if bad is not None:
                raise _invalid(key, bad, f"String must be one of: {', '.join(spec.choices)}")
        elif not (all(_REPLICA.fullmatch(item) for item in items) or "".join(items) == "*"):
            # ThrottledReplicaListValidator, which shows the value as a Java list
            raise _invalid(key, f"[{', '.join(items)}]",
                           f"{key} must be the literal '*' or a list of replicas in the "
                           "following format: [partitionId]:[brokerId],[partitionId]:"
                           "[brokerId],...")
        return ",".join(items)
    if spec.choices and value not in spec.choices:
        raise _invalid(key, value, f"String must be one of: {', '.join(spec.choices)}")
    return value


def check_together(configs: dict[str, str]) -> None:
    """Raise InvalidConfig, with Kafka's message, for checked values that conflict with
    each other (`LogConfig.validateValues`): a minimum compaction lag above the maximum,
    each taken from `configs` or its default."""
    low = int(configs.get("min.compaction.lag.ms", CONFIGS["min.compaction.lag.ms"].default or 0))
    high = int(configs.get("max.compaction.lag.ms", CONFIGS["max.compaction.lag.ms"].default or 0))
    if low > high:
        raise InvalidConfig(f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                            f"max.compaction.lag.ms ({high})")


def compacted(configs: dict[str, str]) -> bool:
    """Does the topic's cleanup.policy name `compact`? Its records then need keys (Kafka
    refuses a record without one: INVALID_RECORD), whether or not a cleaner runs."""
    return "compact" in _list_items(configs.get("cleanup.policy", "delete"))


def deletes(configs: dict[str, str]) -> bool:
    """Does the topic's cleanup.policy name `delete` (Kafka's LogConfig.delete)? Without it
    neither retention nor DeleteRecords removes records."""
    return "delete" in _list_items(configs.get("cleanup.policy", "delete"))


def timestamp_bounds(configs: dict[str, str]) -> tuple[int, int] | None:
    """(before, after): how far behind and ahead of the broker's clock, in ms, a CreateTime
    topic's record timestamps may be, from its explicit `configs`; None when neither is
    bounded or the topic is LogAppendTime (its timestamps are the broker's). As Kafka 3.6+'s
    LogConfig: a bound left at its default takes `message.timestamp.difference.max.ms`."""
    if configs.get("message.timestamp.type") == "LogAppendTime":
        return None
    unbounded = 2**63 - 1

    def bound(key: str) -> int:
        try:
            return int(configs.get(key, unbounded))
        except ValueError:  # a value stored before CreateTopics checked it: Kafka's default
            return unbounded

    difference = bound("message.timestamp.difference.max.ms")
    before = bound("message.timestamp.before.max.ms")
    after = bound("message.timestamp.after.max.ms")
    before = difference if before == unbounded else before
    after = difference if after == unbounded else after
    if before == unbounded and after == unbounded:
        return None
    return before, after
