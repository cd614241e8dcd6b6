"""The extension API: what a populator extension is and what `filter()` must do.

An extension is one workflow (replication, notification, gc, …). The populator hands it
every journal entry, in seq order, and publishes whatever messages it returns. Extensions
are found through the `crossbeat.extensions` entry-point group (see `registry`) and built
with their own section of the config (`[extensions.<name>]`).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import quote

import orjson
from pydantic import BaseModel, ConfigDict

from crossbeat.populator.entry import JournalEntry

CHECKPOINT_KIND = "checkpoint"


def message_key(bucket: str, key: str) -> bytes:
    """The Kafka key of a message about an object: URL-encoded `bucket/key`.

    Every version of one object gets the same key, hence the same partition, hence order.
    """
    return quote(f"{bucket}/{key}", safe="").encode()


@dataclass(frozen=True)
class Message:
    """One record to publish: `value` is a JSON document with `kind` and `schema` fields."""

    topic: str
    key: bytes
    value: Mapping[str, Any]

    def encoded_value(self) -> bytes:
        return orjson.dumps(self.value)


@dataclass(frozen=True)
class ExtensionContext:
    """What the populator tells an extension when building it."""

    topic_prefix: str = "crossbeat-"
    extras: Mapping[str, Any] = field(default_factory=dict)

    def topic(self, name: str) -> str:
        """The full topic name for a short one (`replication` → `crossbeat-replication`)."""
        return f"{self.topic_prefix}{name}"


class NoSettings(BaseModel):
    """The settings model of an extension that takes none: any key is an error."""

    model_config = ConfigDict(extra="forbid")


class Extension(abc.ABC):
    """Base class of populator extensions.

    Contract:
    - `settings_model` validates the extension's config section; a bad section is a
      ConfigError when the populator starts, never later.
    - `topics()` names every topic `filter` may publish to (the populator creates them and
      writes its periodic checkpoint record into each).
    - `filter(entry)` is called once per journal entry, in seq order, from one thread. It
      returns the messages to publish (possibly none) and must be a pure function of the
      entry and the settings: no I/O, no hidden state. The populator may call it again for
      the same entry after a crash (redelivery is allowed, gaps are not), so the messages it
      returns must be safe to process twice.
    - It must not raise for entries it does not care about; raising stops the populator
      (nothing is checkpointed past the failing entry).
    """

    name: ClassVar[str] = ""
    settings_model: ClassVar[type[BaseModel]] = NoSettings

    def __init__(self, settings: BaseModel, context: ExtensionContext) -> None:
        self.settings = settings
        self.context = context

    @abc.abstractmethod
    def topics(self) -> list[str]:
        """Full names of the topics this extension publishes to."""

    @abc.abstractmethod
    def filter(self, entry: JournalEntry) -> list[Message]:
        """The messages to publish for `entry` (see the class contract)."""
