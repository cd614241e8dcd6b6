"""JSON documents as stored in the database (orjson bytes)."""

from __future__ import annotations

from typing import Any

import orjson

from crossbeat.metadata.errors import InvalidMetadata


def dump(doc: Any) -> bytes:
    try:
        return orjson.dumps(doc)
    except TypeError as exc:
        raise InvalidMetadata(f"metadata is not JSON-serialisable: {exc}") from exc


def load(blob: bytes) -> Any:
    return orjson.loads(blob)


def require_str(doc: dict[str, Any], field: str, *, allow_empty: bool = False) -> str:
    """doc[field] as a str that SQLite can store (valid UTF-8), or InvalidMetadata."""
    value = doc.get(field)
    if not isinstance(value, str) or (not value and not allow_empty):
        raise InvalidMetadata(f"metadata field {field!r} must be a non-empty string, got {value!r}")
    return check_text(value, field)


def check_text(value: str, what: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMetadata(f"{what} is not valid UTF-8: {value!r}") from exc
    return value
