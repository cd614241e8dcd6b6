"""Manifests that are not what sfs writes are refused as ManifestInvalid, never trusted."""

from __future__ import annotations

import orjson
import pytest

from crossbeat.repositories.sfs_manifest import MAX_CHUNK_SIZE, Manifest, ManifestInvalid


def raw(**fields: object) -> bytes:
    doc = {"version": 1, "objectId": "06w2tabcdefghijk0mn", "size": 5, "chunkSize": 4194304,
           "chunkCount": 1, "digestAlgorithm": "siphash-2-4", "digests": ["0" * 16], "created": 1.0, "locked": False}
    doc.update(fields)
    return orjson.dumps(doc)


def test_a_written_manifest_reads_back() -> None:
    manifest = Manifest.from_bytes(raw())
    assert Manifest.from_bytes(manifest.to_bytes()) == manifest


@pytest.mark.parametrize("fields", [
    {"chunkSize": MAX_CHUNK_SIZE + 1},  # read whole, it would be a MemoryError
    {"chunkSize": 2**50, "size": 2**50},
    {"chunkSize": 0},
    {"size": -1},
])
def test_sizes_out_of_bounds_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ManifestInvalid):
        Manifest.from_bytes(raw(**fields))
