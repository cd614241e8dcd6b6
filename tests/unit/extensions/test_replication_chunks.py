from __future__ import annotations

import random

from crossbeat.extensions.replication.destinations import _exact_chunks


def test_exact_chunks_repartitions_any_stream_into_exact_parts() -> None:
    rng = random.Random(7)
    for _ in range(300):
        data = rng.randbytes(rng.randint(0, 5000))
        size = rng.randint(1, 700)
        pieces, i = [], 0
        while i < len(data):
            n = rng.randint(1, 900)
            pieces.append(data[i:i + n])
            i += n
        out = list(_exact_chunks(iter(pieces), size))
        assert b"".join(out) == data
        assert all(len(p) == size for p in out[:-1])
        assert not out or 0 < len(out[-1]) <= size
        assert all(type(p) is bytes for p in out)
