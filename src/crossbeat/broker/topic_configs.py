"""Which values of the numeric and enumerated topic configs we accept, with Kafka's bounds
and messages.

Bounds are Kafka's `LogConfig` validators: `retention.ms` and `retention.bytes` at least -1
(-1 = unlimited), `segment.ms` at least 1, `max.message.bytes` at least 0,
`min.insync.replicas` at least 1, and `segment.bytes` at least 1 MiB — Kafka 4.0's minimum
(KIP-1030; 3.x allowed 14 bytes). We take 4.0's because the stream store never rolls a
segment below 1 KiB (`StreamLimits.resolve` raises smaller sizes), so a smaller value would
be accepted and reported but not honoured. INT configs must fit 32 bits, LONG ones 64.
`compression.type` takes Kafka's names exactly (case matters, as in Kafka's validator).
"""

from __future__ import annotations

import re

_INT, _LONG = "INT", "LONG"
_RANGE = {_INT: (-(2**31), 2**31 - 1), _LONG: (-(2**63), 2**63 - 1)}
_NUMBER = re.compile(r"[+-]?[0-9]+")  # what Java's Integer/Long.parseLong take, once trimmed

MIN_SEGMENT_BYTES = 1024 * 1024

NUMERIC_CONFIGS: dict[str, tuple[str, int]] = {
    "retention.ms": (_LONG, -1),
    "retention.bytes": (_LONG, -1),
    "segment.bytes": (_INT, MIN_SEGMENT_BYTES),
    "segment.ms": (_LONG, 1),
    "max.message.bytes": (_INT, 0),
    "min.insync.replicas": (_INT, 1),
}
"""Numeric topic config -> (Kafka type, smallest value allowed)."""


def numeric_config_error(key: str, value: str) -> str | None:
    """Kafka's message for an invalid value of numeric config `key`, or None if it is valid
    (or `key` is not numeric)."""
    spec = NUMERIC_CONFIGS.get(key)
    if spec is None:
        return None
    kind, minimum = spec
    text = value.strip()
    low, high = _RANGE[kind]
    if not _NUMBER.fullmatch(text) or not low <= int(text) <= high:
        return f"Invalid value {value} for configuration {key}: Not a number of type {kind}"
    if int(text) < minimum:
        return f"Invalid value {value} for configuration {key}: Value must be at least {minimum}"
    return None


CHOICE_CONFIGS: dict[str, tuple[str, ...]] = {
    # Kafka's BrokerCompressionType names, in its order (the message lists them so)
    "compression.type": ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
}
"""Topic config -> the only values Kafka's `ValidString` validator accepts."""


def choice_config_error(key: str, value: str) -> str | None:
    """Kafka's message for a value of `key` outside its allowed strings, or None if it is
    one of them (or `key` has no such list)."""
    allowed = CHOICE_CONFIGS.get(key)
    if allowed is None or value in allowed:
        return None
    return (f"Invalid value {value} for configuration {key}: "
            f"String must be one of: {', '.join(allowed)}")
