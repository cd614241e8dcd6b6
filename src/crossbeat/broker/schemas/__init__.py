"""Kafka message classes kafka-python does not ship, built by kafka-python's own JSON loader
from Apache Kafka's message definitions (clients/src/main/resources/common/message/*.json,
copied unchanged next to this module).

- ConsumerGroupHeartbeat (68) v0-1: the KIP-848 consumer group protocol.
- ConsumerGroupDescribe (69): the request as of Kafka 4 (v0-1, identical), the response
  as first released (v0); we answer v0 only.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg]
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg]
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg]
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg]
    pass


__all__ = ["ConsumerGroupDescribeRequest", "ConsumerGroupDescribeResponse",
           "ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse"]
