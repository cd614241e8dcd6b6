"""Finding extensions by name through the `crossbeat.extensions` entry-point group.

The populator never imports an extension by name: third-party extensions and ours load
the same way, from `[project.entry-points."crossbeat.extensions"]`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError

from crossbeat.errors import ConfigError
from crossbeat.populator.extension import Extension, ExtensionContext

GROUP = "crossbeat.extensions"


def available_extensions() -> dict[str, Any]:
    """Entry points of every installed extension, by name."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def extension_class(name: str) -> type[Extension]:
    """The Extension subclass registered as `name`; ConfigError if there is none."""
    found = available_extensions()
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise ConfigError(f"unknown extension {name!r} (installed: {known})")
    cls = found[name].load()
    if not (isinstance(cls, type) and issubclass(cls, Extension)):
        raise ConfigError(f"extension {name!r} does not point at an Extension subclass")
    return cls


def load_extensions(
    names: Sequence[str],
    sections: Mapping[str, Mapping[str, Any]],
    context: ExtensionContext,
) -> list[Extension]:
    """Build the enabled extensions, each with its validated config section.

    Every name is checked before any extension is built, so a typo changes nothing.
    """
    if len(set(names)) != len(names):
        raise ConfigError(f"an extension is enabled twice: {list(names)}")
    classes = [(name, extension_class(name)) for name in names]
    built: list[Extension] = []
    for name, cls in classes:
        try:
            settings = cls.settings_model(**dict(sections.get(name, {})))
        except ValidationError as exc:
            raise ConfigError(f"invalid [extensions.{name}] settings: {exc}") from exc
        built.append(cls(settings, context))
    return built
