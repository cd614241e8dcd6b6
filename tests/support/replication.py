"""The replication configuration the replication tests put on their source buckets."""

from __future__ import annotations

from typing import Any


def replication_rule(destination: str, storage_class: str = "b") -> dict[str, Any]:
    """Replicate every key, delete markers included, to bucket `destination` at the sites
    `storage_class` names (crossbeat's StorageClass names the destination sites: not a
    class to give the replica)."""
    return {
        "Role": "arn:aws:iam::000000000000:role/crossbeat",
        "Rules": [{"ID": "to-b", "Priority": 1, "Status": "Enabled", "Filter": {"Prefix": ""},
                   "DeleteMarkerReplication": {"Status": "Enabled"},
                   "Destination": {"Bucket": f"arn:aws:s3:::{destination}",
                                   "StorageClass": storage_class}}],
    }
