"""The queue populator: tails the gateway's metadata journal and publishes what extensions
select to Kafka-protocol topics, checkpointing only what the broker acknowledged.

Public surface: `Extension`, `Message`, `ExtensionContext`, `message_key` (the extension
API), `JournalEntry`, and `Populator` (the loop). Extensions are loaded by name through the
`crossbeat.extensions` entry-point group (`registry.load_extensions`); this package never
imports one directly.
"""

from crossbeat.populator.entry import JournalEntry
from crossbeat.populator.extension import (
    CHECKPOINT_KIND,
    Extension,
    ExtensionContext,
    Message,
    message_key,
)

__all__ = [
    "CHECKPOINT_KIND",
    "Extension",
    "ExtensionContext",
    "JournalEntry",
    "Message",
    "message_key",
]
