"""crossbeat's Kafka wire-protocol broker over the stream store (`crossbeat.stream`).

Entry points: `run_broker(settings, ready, stop)` serves until stopped (what
`crossbeat broker` and `crossbeat up` run); `BrokerSettings` is its configuration.
"""

from crossbeat.broker.settings import BrokerSettings

__all__ = ["BrokerSettings", "run_broker"]


def __getattr__(name: str) -> object:
    # the server pulls in the stream store and every handler; import it on first use
    if name == "run_broker":
        from crossbeat.broker.server import run_broker

        return run_broker
    raise AttributeError(name)
