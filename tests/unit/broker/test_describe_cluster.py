"""DescribeCluster over the wire: this broker as the cluster, and only broker endpoints."""

from __future__ import annotations

from crossbeat.broker.codec import APIS
from crossbeat.broker.errors import ErrorCode
from tests.unit.broker.conftest import LoopBroker, call


def test_describe_cluster(loop_broker: LoopBroker) -> None:
    q = APIS[60].request
    host, port = loop_broker.address.rsplit(":", 1)
    with loop_broker.connect() as sock:
        resp = call(sock, q(version=2, include_cluster_authorized_operations=True,
                            endpoint_type=1, include_fenced_brokers=True))
        assert (resp.error_code, resp.cluster_id, resp.controller_id) == (0, "crossbeat", 0)
        assert [(b.broker_id, b.host, b.port, b.is_fenced) for b in resp.brokers] == [
            (0, host, int(port), False)]
        resp = call(sock, q(version=0, include_cluster_authorized_operations=False))
        assert resp.error_code == 0 and len(resp.brokers) == 1
        resp = call(sock, q(version=1, include_cluster_authorized_operations=False,
                            endpoint_type=2))
        assert (resp.error_code, resp.error_message) == (
            ErrorCode.MISMATCHED_ENDPOINT_TYPE, "The request was sent to an endpoint of type "
            "BROKER, but we wanted an endpoint of type CONTROLLER")
