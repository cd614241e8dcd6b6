"""ascii_int: only plain ASCII decimal numbers are numbers."""

from __future__ import annotations

import pytest

from crossbeat.s3.numerals import ascii_int


@pytest.mark.parametrize(("text", "signed", "value"), [
    ("0", False, 0), ("0042", False, 42), ("18446744073709551615", False, 2**64 - 1),
    ("-5", True, -5), ("5", True, 5),
])
def test_plain_numbers(text: str, signed: bool, value: int) -> None:
    assert ascii_int(text, signed=signed) == value


@pytest.mark.parametrize("text", [
    "", "-", "-5", "+5", " 5", "5 ", "1_000", "\u00b2", "\u0663", "\uff15", "5.0", "0x10",
    "1" * 21, "9" * 5000,
])
def test_anything_else_is_none(text: str) -> None:
    assert ascii_int(text) is None


def test_signed_allows_one_leading_minus_only() -> None:
    assert ascii_int("--5", signed=True) is None
    assert ascii_int("-\u00b2", signed=True) is None
