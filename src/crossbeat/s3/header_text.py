"""Header values as text: how a request's header bytes are read as text, and how text is
sent back in a header. Standard library only: the replication extension imports it too."""

from __future__ import annotations

import base64


def wire_text(value: str) -> str:
    """A request header's value as the text the client meant. Header bytes arrive as
    latin-1 code points; non-ASCII bytes that are UTF-8 are read as UTF-8 (what a client
    sending raw non-ASCII means), others stay as they came."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def encoded_word(value: str) -> str:
    """`value` as one RFC 2047 encoded word, `=?UTF-8?B?...?=` (ASCII, and unfolded: a
    header value must not hold a line break), as S3 sends non-ASCII metadata."""
    return "=?UTF-8?B?" + base64.b64encode(value.encode("utf-8", "surrogateescape")).decode() + "?="
