"""Topics → partitions → streams.

Partition `p` of topic `t` is the stream named `t-p`. Each stream's persisted config holds the
topic's Kafka configs (only those set explicitly) plus three bookkeeping keys, so the topic
table is rebuilt from the store alone on start:

- `crossbeat.topic`: the topic name,
- `crossbeat.partition`: this stream's partition index,
- `crossbeat.partitions`: the topic's partition count.

A topic's streams are created, and deleted, all in one placement write (`StreamStore.
create_streams` / `delete_streams`), so a failure or a crash leaves all or none of them.
Start still creates partitions missing below the recorded count (left by versions that
created them one by one).

Partition 0's stream holds the authoritative copy of the Kafka configs: an alter writes it
last, so an alter that fails or crashes part way is undone on start by copying partition 0's
configs to the others.

A change the disk refuses (full, out of inodes) is TopicError(KAFKA_STORAGE_ERROR), as Kafka
answers for a failed log directory, and leaves the topic as it was.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field

from crossbeat.broker.errors import ErrorCode
from crossbeat.broker.recompress import missing_codec_library
from crossbeat.broker.topic_configs import (
    CONFIGS,
    InvalidConfig,
    check_name,
    check_together,
    check_value,
)
from crossbeat.stream import Stream, StreamStore
from crossbeat.stream.settings import StreamSettings

log = logging.getLogger(__name__)

TOPIC_KEY = "crossbeat.topic"
PARTITION_KEY = "crossbeat.partition"
PARTITIONS_KEY = "crossbeat.partitions"
_INTERNAL_KEYS = (TOPIC_KEY, PARTITION_KEY, PARTITIONS_KEY)
_TOPIC_ID_NAMESPACE = uuid.UUID("5b0c4b1e-2f4e-4d0a-9a61-63726f737362")

MAX_NAME_LENGTH = 249  # Kafka's; the store's stream names leave room for "-<partition>"
_LEGAL_NAME = re.compile(rf"[a-zA-Z0-9._-]{{1,{MAX_NAME_LENGTH}}}")
MAX_PARTITIONS = 10000

SUPPORTED_CONFIGS = tuple(CONFIGS)
"""Topic configs we accept on CreateTopics and report in DescribeConfigs."""


class TopicError(Exception):
    """A topic operation failed with a Kafka error code and a message for the client."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Topic:
    """One Kafka topic: its partitions' streams (index = partition) and explicit configs."""

    name: str
    partitions: list[Stream]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def log_append_time(self) -> bool:
        return self.configs.get("message.timestamp.type") == "LogAppendTime"

    @property
    def topic_id(self) -> uuid.UUID:
        """The topic's id (Metadata v10+, KIP-848 assignments): derived from the name, so
        it is stable across restarts without being stored. Unlike Kafka's, a topic deleted
        and created again gets the same id."""
        return topic_id(self.name)


def topic_id(name: str) -> uuid.UUID:
    """The id of topic `name` (see `Topic.topic_id`), also of one not created yet."""
    return uuid.uuid5(_TOPIC_ID_NAMESPACE, name)


def stream_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def leader_epoch(stream: Stream) -> int:
    """A partition's leader epoch: its open range's index, which every batch appended to it
    carries as partitionLeaderEpoch. (Not the number of ranges: retention drops old ones.)"""
    return stream.ranges[-1].index


def check_topic_name(name: str) -> None:
    """Raise TopicError(INVALID_TOPIC_EXCEPTION) unless `name` is a legal Kafka topic name."""
    if not name or name in (".", "..") or not _LEGAL_NAME.fullmatch(name):
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"invalid topic name {name!r}: 1-{MAX_NAME_LENGTH} characters of [a-zA-Z0-9._-], "
            "not '.' or '..'",
        )


def collision_key(name: str) -> str:
    """`name` with '.' read as '_': Kafka refuses a topic whose key equals another's,
    because metric names replace '.' by '_' and would mix the two topics' metrics."""
    return name.replace(".", "_")


def default_configs(stream: StreamSettings, max_message_bytes: int) -> dict[str, str]:
    """The value every topic config takes when the topic does not set it: Kafka's default,
    or the broker setting behind it."""
    defaults = {key: spec.default for key, spec in CONFIGS.items() if spec.default is not None}
    defaults.update({
        "retention.ms": str(stream.retention_ms if stream.retention_ms is not None else -1),
        "retention.bytes": str(stream.retention_bytes if stream.retention_bytes is not None else -1),
        "segment.bytes": str(stream.segment_bytes),
        "segment.ms": str(stream.segment_ms),
        "max.message.bytes": str(max_message_bytes),
    })
    return defaults


def check_configs(configs: dict[str, str]) -> dict[str, str]:
    """`configs` as they are stored (see `topic_configs.check_value`); raises
    TopicError(INVALID_CONFIG) for a config we do not know or cannot honour (including a
    compression.type whose codec library is not installed). Names are checked before
    values, as Kafka does."""
    checked: dict[str, str] = {}
    try:
        for key in configs:
            check_name(key)
        for key, value in configs.items():
            checked[key] = check_value(key, value)
        check_together(checked)
    except InvalidConfig as exc:
        raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    codec = checked.get("compression.type")
    if codec is not None and (package := missing_codec_library(codec)) is not None:
        # accepting it would store batches in a codec other than the one reported
        raise TopicError(ErrorCode.INVALID_CONFIG,
                         f"compression.type {codec} is not available on this broker: "
                         f"it needs {package}, which is not installed")
    return checked


def _kafka_configs(config: dict[str, str]) -> dict[str, str]:
    """A stream config without the bookkeeping keys: the topic's explicit Kafka configs."""
    return {k: v for k, v in config.items() if k not in _INTERNAL_KEYS}


def _storage_error(what: str, exc: OSError) -> TopicError:
    """The TopicError for a change `what` the disk refused (logged, since the operator
    must free space)."""
    log.error("%s: %s", what, exc)
    return TopicError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what}: {exc.strerror or exc}")


def _write_configs(stream: Stream, configs: dict[str, str]) -> None:
    """Replace `stream`'s Kafka configs, keeping its bookkeeping keys (blocking, durable)."""
    config = {k: v for k, v in stream.config.items() if k in _INTERNAL_KEYS}
    config.update(configs)
    stream.update_config(config)


class Topics:
    """The topic table over one `StreamStore`. Mutations are synchronous (no await inside),
    so request handlers see them atomically on the event loop."""

    def __init__(self, store: StreamStore) -> None:
        self._store = store
        self._topics: dict[str, Topic] = {}
        self._by_collision_key: dict[str, str] = {}  # collision_key(name) -> name
        self._load()

    def _load(self) -> None:
        found: dict[str, dict[int, Stream]] = {}
        counts: dict[str, int] = {}
        for name in self._store.streams():
            stream = self._store.get_stream(name)
            if stream is None or TOPIC_KEY not in stream.config:
                continue
            cfg = stream.config
            try:
                topic, index, count = cfg[TOPIC_KEY], int(cfg[PARTITION_KEY]), int(cfg[PARTITIONS_KEY])
            except (KeyError, ValueError):
                log.warning("stream %s has unreadable topic bookkeeping %r; ignored", name, cfg)
                continue
            found.setdefault(topic, {})[index] = stream
            counts[topic] = max(counts.get(topic, 0), count)
        # The repairs below write to the disk; one the disk refuses is logged and tried
        # again at the next start: refusing to start would take every topic offline.
        for topic, streams in found.items():
            configs = _kafka_configs(streams[min(streams)].config)
            partitions: list[Stream] = []
            for index in range(counts[topic]):
                stream = streams.get(index)
                if stream is None:
                    log.warning("topic %s lacks partition %d (interrupted create); creating it",
                                topic, index)
                    try:
                        [stream] = self._create_streams(topic, [index], counts[topic], configs)
                    except OSError as exc:
                        log.error("topic %s: cannot create missing partition %d (%s); serving "
                                  "only the %d before it until a restart can", topic, index, exc,
                                  index)
                        break
                elif _kafka_configs(stream.config) != configs:
                    log.warning("topic %s partition %d has stale configs (interrupted alter); "
                                "updating it", topic, index)
                    try:
                        _write_configs(stream, configs)
                    except OSError as exc:
                        log.error("topic %s partition %d: cannot update its stale configs (%s); "
                                  "its retention and segment limits stay stale until a restart "
                                  "can", topic, index, exc)
                partitions.append(stream)
            if not partitions:
                log.error("topic %s is not served until its partition 0 can be created", topic)
                continue
            self._topics[topic] = Topic(topic, partitions, configs)
            self._by_collision_key.setdefault(collision_key(topic), topic)

    def _create_streams(self, topic: str, indexes: list[int], count: int,
                        configs: dict[str, str]) -> list[Stream]:
        """Create partitions `indexes` of `topic`, all or none; OSError if the disk refuses."""
        names = [stream_name(topic, index) for index in indexes]
        leftovers = [name for name in names if self._store.get_stream(name) is not None]
        if leftovers:
            # left over from a topic deleted while a reader held it, or a name collision
            # with another topic's partition; reuse is wrong, so replace them
            self._store.delete_streams(leftovers)
        return self._store.create_streams([
            (name, {**configs, TOPIC_KEY: topic, PARTITION_KEY: str(index),
                    PARTITIONS_KEY: str(count)})
            for name, index in zip(names, indexes, strict=True)
        ])

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def partition(self, name: str, index: int) -> Stream | None:
        topic = self._topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def all(self) -> list[Topic]:
        return list(self._topics.values())

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return next((t for t in self._topics.values() if t.topic_id == topic_id), None)

    def partition_counts(self) -> dict[str, int]:
        """Every topic's partition count."""
        return {name: len(t.partitions) for name, t in self._topics.items()}

    def create(self, name: str, num_partitions: int, configs: dict[str, str] | None = None,
               *, validate_only: bool = False) -> Topic | None:
        """Create topic `name`; raises TopicError (exists, bad name, bad count or config;
        KAFKA_STORAGE_ERROR if the disk refuses, creating nothing).

        A name that differs from an existing topic's only in '.' versus '_' is refused with
        INVALID_TOPIC_EXCEPTION, as Kafka does (see `collision_key`).
        """
        check_topic_name(name)
        if name in self._topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        other = self._by_collision_key.get(collision_key(name))
        if other is not None:
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"Topic '{name}' collides with existing topics: {other}")
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"number of partitions must be 1-{MAX_PARTITIONS}, not {num_partitions}")
        configs = check_configs(dict(configs or {}))
        if validate_only:
            return None
        try:
            partitions = self._create_streams(name, list(range(num_partitions)), num_partitions,
                                              configs)
        except OSError as exc:
            raise _storage_error(f"could not create topic {name!r}", exc) from exc
        topic = Topic(name, partitions, configs)
        self._topics[name] = topic
        self._by_collision_key[collision_key(name)] = name
        log.info("created topic %s with %d partition(s)", name, num_partitions)
        return topic

    def add_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        """Grow topic `name` to `count` partitions (new ones empty, with the topic's
        configs); raises TopicError: UNKNOWN_TOPIC_OR_PARTITION, or INVALID_PARTITIONS with
        Kafka's controller's message for a count that is not an increase (or above
        MAX_PARTITIONS), or KAFKA_STORAGE_ERROR if the disk refuses (adding none). The new
        streams are created all at once and each records `count`. Readers see the new
        partitions at once (Metadata, Produce, Fetch)."""
        topic = self._topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{name}' does not exist.")
        current = len(topic.partitions)
        if count < current:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"The topic {name} currently has {current} partition(s); {count} "
                             "would not be an increase.")
        if count == current:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic already has {current} partition(s).")
        if count > MAX_PARTITIONS:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"number of partitions must be 1-{MAX_PARTITIONS}, not {count}")
        if validate_only:
            return
        try:
            added = self._create_streams(name, list(range(current, count)), count, topic.configs)
        except OSError as exc:
            raise _storage_error(f"could not add partitions to topic {name!r}", exc) from exc
        topic.partitions.extend(added)
        log.info("topic %s grew from %d to %d partitions", name, current, count)

    def alter_configs(self, name: str, configs: dict[str, str], *,
                      validate_only: bool = False) -> None:
        """Replace topic `name`'s explicit configs by `configs` (checked as on create);
        raises TopicError (unknown topic, bad config; KAFKA_STORAGE_ERROR if the disk
        refuses, the old configs staying in force). Persisted before returning; takes
        effect on the next produce (size, codec, timestamp type, min ISR) and the next
        retention pass or segment roll (cleanup policy, retention and segment limits)."""
        topic = self._topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{name}' does not exist.")
        configs = check_configs(dict(configs))
        if validate_only or configs == topic.configs:
            return
        old = topic.configs
        written: list[Stream] = []
        try:
            # partition 0 last: it is the copy _load trusts, so until it is written a
            # restart restores the old configs to the others
            for stream in [*topic.partitions[1:], topic.partitions[0]]:
                _write_configs(stream, configs)
                written.append(stream)
        except OSError as exc:
            error = _storage_error(f"could not alter configs of topic {name!r}", exc)
            try:
                for stream in written:
                    _write_configs(stream, old)
            except OSError as undo:
                log.error("topic %s: cannot restore the old configs of every partition (%s); "
                          "the next start restores them", name, undo)
            raise error from exc
        topic.configs = configs
        log.info("altered configs of topic %s: %s", name, configs)

    def delete(self, name: str) -> None:
        """Delete topic `name` and its data; raises TopicError: UNKNOWN_TOPIC_OR_PARTITION,
        or KAFKA_STORAGE_ERROR if the disk refuses (the topic then stays, whole)."""
        topic = self._topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        try:
            self._store.delete_streams([s.name for s in topic.partitions
                                        if self._store.get_stream(s.name) is not None])
        except OSError as exc:
            raise _storage_error(f"could not delete topic {name!r}", exc) from exc
        del self._topics[name]
        key = collision_key(name)
        if self._by_collision_key.get(key) == name:
            del self._by_collision_key[key]
            # colliding topics may predate the check; the survivor keeps the key taken
            survivor = next((t for t in self._topics if collision_key(t) == key), None)
            if survivor is not None:
                self._by_collision_key[key] = survivor
        log.info("deleted topic %s", name)
