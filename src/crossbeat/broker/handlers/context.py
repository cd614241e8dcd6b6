"""What every request handler receives besides the request body."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crossbeat.broker.broker import Broker


@dataclass(frozen=True)
class Context:
    """The broker, and who asked with which API version."""

    broker: Broker
    version: int
    client_id: str | None
    client_host: str


Handler = Callable[[Context, Any], Awaitable[Any | None]]
"""A handler returns the response body (kafka-python object), or None for no response."""
