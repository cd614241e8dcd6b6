"""objectIds: an encoded timestamp whose last characters vary fastest (seed 003).

An id is one integer, `(microseconds since the epoch << 40) | 40 random bits`, written in
base 36 (digits, lowercase letters) with a fixed width. Fixed width keeps ids sortable by
creation time; the random low-order bits sit at the end, so the last three characters — the
sfs fan-out directory — vary fastest and spread objects evenly (46 656 directories), which is
the seed's reason for using the *last* three characters.
"""

from __future__ import annotations

import random
import re
import time

from crossbeat.repositories.errors import RepositoryError

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
_RANDOM_BITS = 40
ID_WIDTH = 19  # 36**19 > 2**98: 40 random bits plus microseconds until about the year 9000

# Keys from other repositories (migration copies them verbatim) may be any safe name, but
# never something a path could be built from: no separators, no dots, bounded length.
_VALID = re.compile(r"[0-9A-Za-z_-]{3,128}")


# base-36 digit pairs: an id is written two digits per step
_PAIRS = tuple(a + b for a in _ALPHABET for b in _ALPHABET)


def new_object_id(now_ns: int | None = None) -> str:
    """Return a fresh objectId (19 base-36 characters).

    The random bits only keep ids made in the same microsecond apart, so they come from
    `random` (seeded from the OS per process, and again after a fork), not a syscall per id.
    """
    micros = (time.time_ns() if now_ns is None else now_ns) // 1000
    value = (micros << _RANDOM_BITS) | random.getrandbits(_RANDOM_BITS)
    pairs = []
    while value:
        value, rem = divmod(value, 1296)
        pairs.append(_PAIRS[rem])
    return "".join(reversed(pairs)).lstrip("0").rjust(ID_WIDTH, "0")


def object_id_time(data_key: str) -> float | None:
    """When an id made by `new_object_id` was created (epoch seconds); None for other ids."""
    if len(data_key) != ID_WIDTH or data_key.strip(_ALPHABET):
        return None
    return (int(data_key, 36) >> _RANDOM_BITS) / 1e6


def check_object_id(data_key: str) -> str:
    """Return `data_key` if it is a safe objectId, else raise `RepositoryError`."""
    if not isinstance(data_key, str) or not _VALID.fullmatch(data_key):
        raise RepositoryError(
            f"invalid data key {data_key!r}: 3-128 characters of [0-9A-Za-z_-] expected"
        )
    return data_key


def is_object_id(name: str) -> bool:
    """True if `name` could be an objectId (used when scanning storage)."""
    return bool(_VALID.fullmatch(name))
