"""crossbeat: moves object data between storage sites.

An S3 gateway journals every metadata change; a populator turns journal entries into keyed
messages on a Kafka-protocol log; PySpark pipelines replicate, notify and collect garbage.
See ARCHITECTURE.md in the shared folder for the contracts between the packages.
"""

__version__ = "0.1.0"
