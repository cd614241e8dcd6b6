"""Kafka message classes kafka-python does not ship, built by kafka-python's own JSON loader
from Apache Kafka's message definitions (clients/src/main/resources/common/message/*.json,
copied unchanged next to this module).

- ConsumerGroupHeartbeat (68) v0-1: the KIP-848 consumer group protocol.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg]
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg]
    pass


__all__ = ["ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse"]
