"""Reading the one TOML file (`crossbeat.toml`) into per-component settings models.

Each component owns a pydantic-settings model (for example `crossbeat.s3.settings`). The CLI
reads the file once with `load_toml` and builds each model with `section_settings`; the
models themselves may read `CROSSBEAT_…` environment variables (pydantic-settings), which
override the file. Nothing else in crossbeat reads `os.environ`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from crossbeat.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def load_toml(path: str | Path | None) -> dict[str, Any]:
    """Return the parsed TOML document at `path`, or {} when no path is given."""
    if path is None:
        return {}
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {p}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc}") from exc


def section_settings(model: type[M], document: dict[str, Any], section: str, **overrides: Any) -> M:
    """Build `model` from `document[section]` plus explicit overrides (CLI flags win).

    Overrides whose value is None are ignored so that unset CLI flags fall through to the
    file, then to the environment, then to the model's defaults.
    """
    data = dict(document.get(section, {}))
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return model(**data)
    except ValidationError as exc:
        raise ConfigError(f"invalid [{section}] settings: {exc}") from exc
