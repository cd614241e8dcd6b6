"""Integers as S3 writes them in headers, query strings and XML: ASCII digits only.

Python's `str.isdigit()` also accepts superscripts ("²"), which `int()` then refuses, and
`int()` itself accepts other scripts' digits ("٣"), surrounding blanks and underscores
("1_000"). AWS accepts none of these, and an unchecked "²" reached `int()` as a 500. Every
parser of a client's number goes through `ascii_int`, which answers None for anything that
is not plain decimal, so each caller raises the error S3 gives for its own field.
"""

from __future__ import annotations

# More digits than any 64-bit value has: refused before int() does the (quadratic) work.
_MAX_DIGITS = 20


def ascii_int(text: str, *, signed: bool = False) -> int | None:
    """`text` as an integer if it is ASCII decimal digits (with one leading '-' when
    `signed`) of at most 20 digits; None otherwise. No blanks, '+' or '_' are allowed:
    callers strip what their field allows around the number."""
    digits = text[1:] if signed and text[:1] == "-" else text
    if not (0 < len(digits) <= _MAX_DIGITS and digits.isascii() and digits.isdigit()):
        return None
    return int(text)
