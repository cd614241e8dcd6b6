"""Pausing and resuming one destination site through the control topic.

A record `{kind: replication.control, site, paused}` keyed by the site name goes to the
one-partition `crossbeat-replication-control` topic. The site's replication query reads
it before planning each batch and, while paused, does not advance its offsets: entries
wait in `crossbeat-replication` and flow again on resume. Works across machines and with
any Kafka cluster, since the state lives in the log.
"""

from __future__ import annotations

import time

from crossbeat.extensions.replication.messages import CONTROL_KIND, SCHEMA
from crossbeat.populator.extension import Message
from crossbeat.populator.publisher import Publisher, ensure_topics


def set_paused(brokers: str, topic: str, site: str, paused: bool) -> None:
    """Publish the site's new state and wait until the broker acknowledged it."""
    ensure_topics(brokers, [topic], 1)
    doc = {"kind": CONTROL_KIND, "schema": SCHEMA, "site": site, "paused": paused, "ts": time.time()}
    publisher = Publisher(brokers)
    try:
        publisher.publish([Message(topic, site.encode(), doc)])
    finally:
        publisher.close()
