"""Which bucket a destination writes a version to (replicationInfo `destination`)."""

from __future__ import annotations

from typing import Any

import pytest

from crossbeat.extensions.replication.destinations import destination_bucket, replica_metadata
from crossbeat.extensions.replication.errors import ReplicationError


def version(**info: Any) -> dict[str, Any]:
    return {"bucket": "src", "key": "k", "versionId": "v", "revision": 3,
            "replicationInfo": {"status": "PENDING", "backends": [{"site": "b"}], **info}}


def test_the_rule_destination_else_the_source_bucket_name() -> None:
    assert destination_bucket(version(destination="arn:aws:s3:::dst")) == "dst"
    assert destination_bucket(version()) == "src"  # written before destination was recorded
    assert destination_bucket(version(destination="")) == "src"


def test_the_replica_is_in_the_destination_bucket() -> None:
    replica = replica_metadata(version(destination="arn:aws:s3:::dst"), [])
    assert replica["bucket"] == "dst" and "revision" not in replica
    assert replica["replicationInfo"]["status"] == "REPLICA"


@pytest.mark.parametrize("arn", ["dst", "arn:aws:s3:::", "arn:aws:s3:::dst/prefix", 7])
def test_a_destination_that_names_no_bucket_fails_the_version(arn: Any) -> None:
    with pytest.raises(ReplicationError) as info:
        destination_bucket(version(destination=arn))
    assert not info.value.retryable
