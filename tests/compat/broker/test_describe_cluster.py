"""describe_cluster from both admin clients: kafka-python sends DescribeCluster (it falls
back to Metadata only when the API is not advertised), confluent-kafka sends Metadata."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient

from tests.compat.broker.helpers import BrokerProcess

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]


def test_describe_cluster(broker: BrokerProcess) -> None:
    host, port = broker.address.rsplit(":", 1)
    kp = KafkaAdminClient(bootstrap_servers=broker.address)
    try:
        described = kp.describe_cluster()
    finally:
        kp.close()
    assert described["cluster_id"] == "crossbeat" and described["controller_id"] == 0
    # is_fenced exists only in DescribeCluster v2's answer, not in the Metadata fallback
    assert [(b["broker_id"], b["host"], b["port"], b["is_fenced"]) for b in described["brokers"]] == [
        (0, host, int(port), False)]

    admin = AdminClient({"bootstrap.servers": broker.address})  # kept: its futures need it
    cluster = admin.describe_cluster().result(20)
    assert cluster.cluster_id == "crossbeat" and cluster.controller.id == 0
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, host, int(port))]
