"""`CROSSBEAT_…` environment variables that no setting reads.

The settings models ignore environment variables they do not know (they share one prefix,
so each sees the others'), which made a misspelt one (`CROSSBEAT_SECRET_KEYS`) silently do
nothing. The CLI warns about each such variable once, before any command runs, naming the
closest known one. A warning, not an error: a variable meant for another version of
crossbeat must not stop this one.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping

from pydantic_settings import BaseSettings

from crossbeat.broker.settings import BrokerSettings
from crossbeat.cli.up import Credentials
from crossbeat.extensions.replication.settings import ReplicationSettings
from crossbeat.metadata.settings import MetadataSettings
from crossbeat.populator.settings import PopulatorSettings
from crossbeat.s3.settings import GatewaySettings
from crossbeat.spark.settings import PipelineSettings

PREFIX = "CROSSBEAT_"
MODELS: tuple[type[BaseSettings], ...] = (
    GatewaySettings, BrokerSettings, MetadataSettings, PopulatorSettings, ReplicationSettings,
    PipelineSettings, Credentials,
)
# read directly, not through a settings model
OTHERS = ("CROSSBEAT_DEBUG",)


def known_variables() -> set[str]:
    """Every variable a settings model (or the CLI itself) reads."""
    names = set(OTHERS)
    for model in MODELS:
        prefix = str(model.model_config.get("env_prefix") or "").upper()
        for name, field in model.model_fields.items():
            names.add(prefix + name.upper())
            if isinstance(field.alias, str):
                names.add(prefix + field.alias.upper())
    return names


def unknown_variables(environ: Mapping[str, str]) -> Iterator[tuple[str, str | None]]:
    """(variable, closest known variable or None) for each `CROSSBEAT_…` variable of
    `environ` that nothing reads. `A__B` (a nested setting) is known when `A` is."""
    known = known_variables()
    for var in sorted(environ):
        upper = var.upper()
        if not upper.startswith(PREFIX) or upper.partition("__")[0] in known:
            continue
        close = difflib.get_close_matches(upper.partition("__")[0], known, n=1, cutoff=0.75)
        yield var, close[0] if close else None


def warnings(environ: Mapping[str, str]) -> list[str]:
    """One line per unknown variable, as the CLI prints them."""
    return [
        f"warning: {var} is not a crossbeat setting and is ignored"
        + (f" (did you mean {close}?)" if close else "")
        for var, close in unknown_variables(environ)
    ]
