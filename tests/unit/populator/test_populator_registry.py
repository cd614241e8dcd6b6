from __future__ import annotations

import pytest

from crossbeat.errors import ConfigError
from crossbeat.populator import Extension, ExtensionContext
from crossbeat.populator.registry import extension_class, load_extensions


def test_replication_is_found_through_its_entry_point() -> None:
    cls = extension_class("replication")
    assert issubclass(cls, Extension)
    assert cls.name == "replication"


def test_unknown_extension_is_a_config_error_naming_the_installed_ones() -> None:
    with pytest.raises(ConfigError, match="unknown extension 'replicaton'.*replication"):
        load_extensions(["replication", "replicaton"], {}, ExtensionContext())


def test_invalid_section_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"\[extensions.replication\]"):
        load_extensions(
            ["replication"], {"replication": {"concurrency": 0}}, ExtensionContext()
        )


def test_enabling_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="twice"):
        load_extensions(["replication", "replication"], {}, ExtensionContext())


def test_loaded_extension_gets_its_section_and_prefixed_topics() -> None:
    [ext] = load_extensions(
        ["replication"],
        {"replication": {"sites": {"b": {"endpoint": "http://127.0.0.1:1"}}}},
        ExtensionContext(topic_prefix="t-"),
    )
    assert ext.topics() == ["t-replication"]
