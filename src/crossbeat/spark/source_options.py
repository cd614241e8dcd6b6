"""The options of `format("crossbeat-kafka")`, checked when a query starts: which
partitions it reads (`Subscription`), from and to which offsets, and what else its
consumers are told (`SourceOptions`). `parse_options` raises ValueError naming the option
for anything unknown, refused or invalid; the options themselves are described in
source.py's docstring.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import KafkaException

from crossbeat.spark import kafka_client
from crossbeat.spark.offsets import EARLIEST, LATEST, Offsets

DEFAULT_ROWS_PER_TASK = 20_000

STRATEGIES = ("subscribe", "subscribePattern", "assign")
KNOWN_OPTIONS = frozenset(
    {
        "kafka.bootstrap.servers", "bootstrap", "subscribe", "subscribepattern", "assign",
        "startingoffsets", "endingoffsets", "failondataloss", "includeheaders",
        "maxoffsetspertrigger", "rowspertask", "kafka.group.id", "pausetopic", "pausekey",
        "startingtimestamp", "startingoffsetsbytimestamp", "endingtimestamp",
        "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy",
        "minoffsetspertrigger", "maxtriggerdelay",
    }
)
# Consumer settings the source decides itself; a `kafka.` option naming one is refused.
REFUSED_KAFKA = {
    "auto.offset.reset": "set the source option startingOffsets to specify where to start",
    "enable.auto.commit": "offsets are tracked in the Spark checkpoint (kafka.group.id has "
    "them committed to a group for lag tools)",
    "enable.auto.offset.store": "offsets are tracked in the Spark checkpoint",
    "enable.partition.eof": "the source reads ranges up to offsets known to exist",
    "key.deserializer": "keys are always read as bytes; decode or cast the key column",
    "value.deserializer": "values are always read as bytes; decode or cast the value column",
    "interceptor.classes": "the source's consumers are librdkafka ones",
}
OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[0,1]}'
TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1700000000000,"1":1700000000000}}'
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Spark's "15m"
# Spark's time suffixes (Utils.timeStringAsMs), in milliseconds; no suffix means ms.
TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                 "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class Subscription:
    """Which partitions the query reads: `subscribe` topics, topics matching
    `subscribePattern`, or `assign`ed partitions."""

    topics: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    assigned: tuple[tuple[str, tuple[int, ...]], ...] | None = None

    def covers(self, topic: str, partition: int) -> bool:
        if self.pattern is not None:
            return self.pattern.fullmatch(topic) is not None
        if self.assigned is not None:
            return partition in dict(self.assigned).get(topic, ())
        return topic in self.topics

    def restrict(self, offsets: Offsets) -> Offsets:
        """`offsets` without the partitions the query no longer reads (its options
        changed since the checkpoint): they are not data loss."""
        out: Offsets = {}
        for topic, parts in offsets.items():
            kept = {p: o for p, o in parts.items() if self.covers(topic, int(p))}
            if kept:
                out[topic] = kept
        return out

    def partitions(self, wm: kafka_client.Watermarks) -> dict[str, list[int]]:
        """The partitions to read as they exist now."""
        if self.pattern is not None:
            return {t: ps for t, ps in wm.all_partitions().items() if self.covers(t, 0)}
        if self.assigned is not None:
            out = {}
            for topic, wanted in self.assigned:
                existing = set(wm.partitions(topic))
                out[topic] = [p for p in wanted if p in existing]
            return out
        return {topic: wm.partitions(topic) for topic in self.topics}


@dataclass(frozen=True)
class Timestamps:
    """Offsets chosen by record timestamp (ms since the epoch): in each partition, the
    first offset whose record timestamp is at or after the partition's timestamp.
    `every`: one timestamp for all partitions (startingTimestamp/endingTimestamp);
    otherwise `partitions` names them (the ...OffsetsByTimestamp JSON)."""

    option: str  # the option it came from, for messages
    every: int | None = None
    partitions: Offsets = field(default_factory=dict)

    def of(self, topic: str, partition: str) -> int | None:
        """The timestamp of a partition; None: the option does not name it."""
        if self.every is not None:
            return self.every
        return self.partitions.get(topic, {}).get(partition)


@dataclass(frozen=True)
class SourceOptions:
    brokers: str
    subscription: Subscription
    # "earliest", "latest", offsets with -2/-1 sentinels, or timestamps (which take
    # precedence, as in Spark: ...Timestamp, then ...OffsetsByTimestamp, then ...Offsets)
    starting: str | Offsets | Timestamps
    ending: str | Offsets | Timestamps
    fail_on_data_loss: bool
    include_headers: bool
    max_rows: int | None
    rows_per_task: int
    group: str | None
    pause_topic: str | None
    pause_key: str
    settings: dict[str, str]  # the other kafka.* options, for every consumer
    # startingOffsetsByTimestampStrategy: "error" (fail) or "latest" for a partition with
    # no record at or after its starting timestamp
    no_match: str = "error"
    min_rows: int | None = None  # minOffsetsPerTrigger
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS


def _bool(opts: dict[str, str], key: str, name: str, default: bool) -> bool:
    value = opts.get(key)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, got {value!r}")
    return value.strip().lower() == "true"


def _positive(opts: dict[str, str], key: str, name: str, default: int | None) -> int | None:
    value = opts.get(key)
    if value is None or not value.strip():
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"option {name} must be a positive integer, got {value!r}")
    return number


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [name for name in STRATEGIES if name.lower() in opts]
    if not given:
        raise ValueError("One of the following options must be specified for Kafka source: "
                         f"{', '.join(STRATEGIES)}. See the docs for more details.")
    if len(given) > 1:
        raise ValueError("Only one of the following options can be specified for Kafka "
                         f"source: {', '.join(STRATEGIES)}. See the docs for more details.")
    name = given[0]
    value = opts[name.lower()]
    if name == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ValueError("No topics to subscribe to as specified value for option "
                             f"'subscribe' is '{value}'")
        return Subscription(topics=topics)
    if name == "subscribePattern":
        if not value.strip():
            raise ValueError("Pattern to subscribe is empty as specified value for option "
                             f"'subscribePattern' is '{value}'")
        try:
            return Subscription(pattern=re.compile(value.strip()))
        except re.error as exc:
            raise ValueError(f"option subscribePattern {value!r} is not a valid regular "
                             f"expression: {exc}") from None
    if not value.strip().startswith("{"):
        raise ValueError("No topicpartitions to assign as specified value for option "
                         f"'assign' is '{value}'")
    try:
        doc = orjson.loads(value)
        assigned = tuple(
            (str(topic), tuple(sorted({_partition(p) for p in parts})))
            for topic, parts in doc.items()
            if isinstance(parts, list) and parts  # checked below
        )
        if len(assigned) != len(doc) or not assigned:
            raise ValueError
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise ValueError(f"option assign: expected e.g. {ASSIGN_EXAMPLE}, got {value}") from None
    return Subscription(assigned=assigned)


def _partition(p: Any) -> int:
    if isinstance(p, bool) or not isinstance(p, int) or p < 0:
        raise ValueError
    return p


def _offsets_option(value: str, name: str, sub: Subscription) -> str | Offsets:
    if value.strip().lower() in ("earliest", "latest"):
        return value.strip().lower()
    try:
        doc = orjson.loads(value)
        offsets = {
            str(t): {str(_partition(int(p))): int(o) for p, o in parts.items()}
            for t, parts in doc.items()
        }
        if any(isinstance(o, (bool, float)) for parts in doc.values() for o in parts.values()):
            raise ValueError
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise ValueError(f"option {name}: expected earliest, latest or e.g. {OFFSETS_EXAMPLE}, "
                         f"got {value}") from None
    for topic, parts in offsets.items():
        for p, off in parts.items():
            if off < EARLIEST:
                raise ValueError(f"option {name}: offset {off} of {topic}[{p}] is invalid "
                                 "(an offset, or -2 for earliest, -1 for latest)")
            if not sub.covers(topic, int(p)):
                raise ValueError(f"option {name} names {topic}[{p}], which the query does "
                                 "not read (see subscribe, subscribePattern or assign)")
    return offsets


def _timestamp(value: str, name: str) -> int:
    if not re.fullmatch(r"\s*\d+\s*", value):
        raise ValueError(f"option {name}: Expected a single long value (a timestamp in "
                         f"milliseconds since the epoch, not negative), got {value.strip()}")
    return int(value)


def _timestamps_json(value: str, name: str, sub: Subscription) -> Offsets:
    try:
        doc = orjson.loads(value)
        if any(isinstance(ts, bool) or not isinstance(ts, int) or ts < 0
               for parts in doc.values() for ts in parts.values()):
            raise ValueError
        stamps = {str(t): {str(_partition(int(p))): ts for p, ts in parts.items()}
                  for t, parts in doc.items()}
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise ValueError(f"option {name}: expected e.g. {TIMESTAMPS_EXAMPLE} (timestamps in "
                         f"milliseconds since the epoch), got {value}") from None
    for topic, parts in stamps.items():
        for p in parts:
            if not sub.covers(topic, int(p)):
                raise ValueError(f"option {name} names {topic}[{p}], which the query does "
                                 "not read (see subscribe, subscribePattern or assign)")
    return stamps


def _bound(opts: dict[str, str], kind: str, sub: Subscription, default: str
           ) -> str | Offsets | Timestamps:
    """Where reading starts (`kind` "starting") or ends ("ending"), by Spark's precedence:
    the `...Timestamp` option, else `...OffsetsByTimestamp`, else `...Offsets` (the options
    not used are not parsed, as Spark does not)."""
    if f"{kind}timestamp" in opts:
        name = f"{kind}Timestamp"
        return Timestamps(name, every=_timestamp(opts[f"{kind}timestamp"], name))
    if f"{kind}offsetsbytimestamp" in opts:
        name = f"{kind}OffsetsByTimestamp"
        return Timestamps(name, partitions=_timestamps_json(
            opts[f"{kind}offsetsbytimestamp"], name, sub))
    return _offsets_option(opts.get(f"{kind}offsets", default), f"{kind}Offsets", sub)


def _duration_ms(opts: dict[str, str], key: str, name: str, default: int) -> int:
    """A duration as Spark writes one ("15m", "30s", "500ms", a bare number of ms)."""
    value = opts.get(key)
    if value is None:
        return default
    match = re.fullmatch(r"(\d+)\s*([a-z]+)?", value.strip().lower())
    if match is None or (match.group(2) or "ms") not in TIME_UNITS_MS:
        raise ValueError(f"option {name} must be a duration such as 15m, 30s or 500ms "
                         "(units us, ms, s, m or min, h, d; none: milliseconds), got "
                         f"{value!r}")
    return int(int(match.group(1)) * TIME_UNITS_MS[match.group(2) or "ms"])


def parse_options(options: Mapping[str, str], *, streaming: bool | None = None) -> SourceOptions:
    """Validate the options of `format("crossbeat-kafka")` (see the module docstring);
    ValueError naming the first bad one. `streaming` None: valid for either kind of query."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    unknown = sorted(k for k in opts if k not in KNOWN_OPTIONS and not k.startswith("kafka."))
    if unknown:
        raise ValueError(f"crossbeat-kafka does not support option(s) {', '.join(unknown)} "
                         "(supported: kafka.bootstrap.servers, subscribe, subscribePattern, "
                         "assign, startingOffsets, endingOffsets, failOnDataLoss, "
                         "includeHeaders, maxOffsetsPerTrigger, rowsPerTask, kafka.group.id, "
                         "pauseTopic, pauseKey, startingTimestamp, startingOffsetsByTimestamp, "
                         "endingTimestamp, endingOffsetsByTimestamp, "
                         "startingOffsetsByTimestampStrategy, minOffsetsPerTrigger, "
                         "maxTriggerDelay, and other kafka.* consumer settings)")
    settings = {k.removeprefix("kafka."): v for k, v in opts.items()
                if k.startswith("kafka.") and k not in KNOWN_OPTIONS}
    for name, why in REFUSED_KAFKA.items():
        if name in settings:
            raise ValueError(f"Kafka option 'kafka.{name}' is not supported: {why}")
    try:
        kafka_client.check_settings(settings)
    except KafkaException as exc:
        raise ValueError(f"kafka.* options: librdkafka refuses them: {exc.args[0].str()} "
                         "(crossbeat-kafka passes kafka.* options to librdkafka, whose "
                         "settings are mostly, not all, those of the Java consumer)") from None
    brokers = (opts.get("kafka.bootstrap.servers") or opts.get("bootstrap") or "").strip()
    if not brokers:
        raise ValueError("crossbeat-kafka needs option kafka.bootstrap.servers")
    sub = _subscription(opts)
    starting = _bound(opts, "starting", sub, "earliest")
    ending = _bound(opts, "ending", sub, "latest")
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if name.lower() in opts:
                raise ValueError(f"option {name} is for batch queries only (spark.read)")
    no_match = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if no_match not in ("error", "latest"):
        raise ValueError("option startingOffsetsByTimestampStrategy must be error or latest, "
                         f"got {opts['startingoffsetsbytimestampstrategy']!r}")
    max_rows = _positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger", None)
    min_rows = _positive(opts, "minoffsetspertrigger", "minOffsetsPerTrigger", None)
    if min_rows is not None and max_rows is not None and min_rows > max_rows:
        raise ValueError(f"The value of minOffsetsPerTrigger({min_rows}) is higher than the "
                         f"maxOffsetsPerTrigger({max_rows}).")
    if streaming is False:
        if starting == "latest" or (
            isinstance(starting, dict)
            and any(o == LATEST for parts in starting.values() for o in parts.values())
        ):
            raise ValueError("startingOffsets can't be latest (-1) for batch queries")
        if ending == "earliest" or (
            isinstance(ending, dict)
            and any(o == EARLIEST for parts in ending.values() for o in parts.values())
        ):
            raise ValueError("endingOffsets can't be earliest (-2) for batch queries")
    if "pausekey" in opts and "pausetopic" not in opts:
        raise ValueError("option pauseKey needs pauseTopic")
    return SourceOptions(
        brokers=brokers,
        subscription=sub,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(opts, "includeheaders", "includeHeaders", False),
        max_rows=max_rows,
        rows_per_task=_positive(opts, "rowspertask", "rowsPerTask", DEFAULT_ROWS_PER_TASK)
        or DEFAULT_ROWS_PER_TASK,
        group=opts.get("kafka.group.id") or None,
        pause_topic=opts.get("pausetopic") or None,
        pause_key=opts.get("pausekey") or "",
        settings=settings,
        no_match=no_match,
        min_rows=min_rows,
        max_trigger_delay_ms=_duration_ms(opts, "maxtriggerdelay", "maxTriggerDelay",
                                          DEFAULT_MAX_TRIGGER_DELAY_MS),
    )
