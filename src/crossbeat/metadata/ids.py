"""Identifiers: version ids (which also serve as sort keys) and multipart upload ids.

A version id is 26 characters of Crockford base32 (URL-safe): Unix milliseconds (10 chars),
then a per-process counter (7 chars), then 45 random bits (9 chars). Ids compare as strings in
the order they were made: within one process strictly increasing, even within one
millisecond or when the wall clock steps back (we never go below the last id's time).
Across processes they are time-ordered to the millisecond, the random tail breaking ties.
"""

from __future__ import annotations

import os
import random
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32: ASCII-sorted
_lock = threading.Lock()
_last_ms = 0
_counter = 0
# Seeded once from the OS; ids need uniqueness, not secrecy, and os.urandom per id releases
# the GIL on every call, which stalls a busy event loop behind worker threads.
_rng = random.Random(os.urandom(32))


def _reseed_after_fork() -> None:
    # A forked child (a gateway worker) inherits the parent's generator state: without a
    # fresh seed two workers would draw the same tails and could mint the same id in the
    # same millisecond. The lock may have been held by another thread at fork time.
    global _lock
    _lock = threading.Lock()
    _rng.seed(os.urandom(32))


os.register_at_fork(after_in_child=_reseed_after_fork)


def _b32(value: int, width: int) -> str:
    chars = []
    for _ in range(width):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def _next_stamp() -> tuple[int, int]:
    global _last_ms, _counter
    with _lock:
        now = time.time_ns() // 1_000_000
        if now > _last_ms:
            _last_ms, _counter = now, 0
        else:
            # Same millisecond, or the clock stepped back: stay on the last millisecond and
            # count, so ids stay strictly increasing.
            _counter += 1
            if _counter >= 1 << 32:
                _last_ms, _counter = _last_ms + 1, 0
        return _last_ms, _counter


def new_version_id() -> str:
    """A new time-ordered, URL-safe version id (26 chars), greater than every earlier one."""
    ms, counter = _next_stamp()
    # 10 chars of time (50 bits ≥ 48), 7 of counter (35 bits ≥ 32), 9 of randomness (45 bits).
    return _b32(ms, 10) + _b32(counter, 7) + _b32(_rng.getrandbits(45), 9)


def version_id_after(floor: str) -> str:
    """A new version id greater than `floor` (an id of this form) even if the clock is behind
    it: the clock's millisecond if that is later, else `floor`'s with a greater counter."""
    fresh = new_version_id()
    if fresh > floor:
        return fresh
    try:
        ms, counter = _b32_value(floor[:10]), _b32_value(floor[10:17])
    except ValueError:  # not one of ours (a replica's foreign key): compare as strings
        return floor + _b32(_rng.getrandbits(45), 9)
    if counter + 1 >= 1 << 35:
        ms, counter = ms + 1, -1
    return _b32(ms, 10) + _b32(counter + 1, 7) + _b32(_rng.getrandbits(45), 9)


def _b32_value(text: str) -> int:
    value = 0
    for char in text:
        digit = _ALPHABET.find(char)
        if digit < 0:
            raise ValueError(f"not Crockford base32: {text!r}")
        value = value * 32 + digit
    return value


def is_minted_id(text: str) -> bool:
    """Whether `text` has the form of an id `new_version_id` makes (26 Crockford base32
    characters), which is then also its version's sort key unless the version was written
    in a way that set another (a replica's source order, a clock behind the latest)."""
    return len(text) == 26 and all(c in _ALPHABET for c in text)


def new_upload_id() -> str:
    """A new multipart upload id: time-ordered like version ids, so listing by id is by age."""
    return new_version_id() + _b32(_rng.getrandbits(30), 6)
