"""Errors raised by the topology planner."""

from __future__ import annotations

from crossbeat.errors import CrossbeatError


class TopologyError(CrossbeatError):
    """Root of the planner's errors."""


class SiteMapError(TopologyError):
    """The site map is invalid; the message lists every problem found, one per line."""


class PlacementError(TopologyError):
    """A replica assignment cannot be made (Kafka would refuse it too)."""
