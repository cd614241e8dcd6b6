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
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsError

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
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc}") from exc
    except OSError as exc:  # a directory, unreadable, ...
        raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}") from exc


def section_settings(model: type[M], document: dict[str, Any], section: str, **overrides: Any) -> M:
    """Build `model` from `document[section]`, the environment and explicit overrides.

    Precedence, highest first: overrides (CLI flags), `CROSSBEAT_…` environment variables,
    the file's section, the model's defaults. Overrides whose value is None are ignored, so
    an unset CLI flag falls through to the environment, then to the file.
    """
    raw = document.get(section, {})
    if not isinstance(raw, dict):
        raise ConfigError(f"[{section}] must be a table of settings, got {type(raw).__name__} {raw!r}")
    data = dict(raw)
    known = set(model.model_fields) | {f.alias for f in model.model_fields.values() if f.alias}
    unknown = sorted(set(data) - known)
    if unknown:  # a misspelt setting would otherwise be ignored without a word
        raise ConfigError(
            f"unknown setting{'s' if len(unknown) > 1 else ''} in [{section}]: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(model.model_fields))})"
        )
    prefix = str(model.model_config.get("env_prefix") or "").upper()
    from_env: set[str] = set()
    flags = {k: v for k, v in overrides.items() if v is not None}
    try:
        if issubclass(model, BaseSettings):
            # pydantic-settings ranks init arguments above the environment, and the file's
            # values reach the model as init arguments: lay the environment over them here.
            env = EnvSettingsSource(model)()
            from_env = set(env)
            data.update(env)
        data.update(flags)
        return model(**data)
    except SettingsError as exc:  # a complex value in the environment that is not JSON
        raise ConfigError(
            f"invalid [{section}] settings: {exc} (list and table settings take JSON in "
            f"{prefix}… environment variables)"
        ) from exc
    except ValidationError as exc:
        def where(name: str) -> str:
            if name in flags:
                return " (from the command line)"
            if name in from_env:
                return f" (from {prefix}{name.upper()})"
            return ""

        problems = [
            f"{'.'.join(map(str, err['loc']))}{where(str(err['loc'][0]) if err['loc'] else '')}: "
            f"{err['msg']}, got {err.get('input')!r}"
            for err in exc.errors()
        ]
        raise ConfigError(f"invalid [{section}] settings: {'; '.join(problems)}") from exc
