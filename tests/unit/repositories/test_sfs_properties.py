"""Property test: whatever the write pieces and chunk size, every range reads back exactly."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossbeat.repositories.sfs import SfsRepository


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunk_size=st.integers(1, 300),
    pieces=st.lists(st.binary(max_size=700), max_size=8),
    ranges=st.lists(st.tuples(st.integers(0, 6000), st.integers(0, 6000)), max_size=6),
)
def test_any_range_reads_back(
    chunk_size: int, pieces: list[bytes], ranges: list[tuple[int, int]]
) -> None:
    data = b"".join(pieces)
    with tempfile.TemporaryDirectory() as root:
        repo = SfsRepository("prop", root, chunk_size=chunk_size)
        with repo.writer() as w:
            for piece in pieces:
                w.write(piece)
            loc = w.commit()
        assert loc.size == len(data)
        assert repo.read_bytes(loc.dataKey) == data
        for a, b in ranges:
            start, end = min(a, b, len(data)), max(a, b)
            assert repo.read_bytes(loc.dataKey, start, end) == data[start:end]
