"""The `crossbeat` command: a click group whose subcommands live one per module.

Subcommands are imported only when invoked, so `crossbeat topology …` never pays for
pyspark or uvicorn imports.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

# name -> "module:attribute" of a click command or group
SUBCOMMANDS: dict[str, str] = {
    "gateway": "crossbeat.cli.gateway:gateway",
    "broker": "crossbeat.cli.broker:broker",
    "topology": "crossbeat.cli.topology:topology",
    "populate": "crossbeat.cli.populate:populate",
    "pipeline": "crossbeat.cli.pipeline:pipeline",
    "replication": "crossbeat.cli.replication:replication",
    "up": "crossbeat.cli.up:up",
}


class LazyGroup(click.Group):
    """A group that imports each subcommand's module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(n for n in SUBCOMMANDS if importlib.util.find_spec(SUBCOMMANDS[n].split(":")[0]))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                raise click.ClickException(f"'{cmd_name}' is not available in this build") from exc
            raise
        command = getattr(module, attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="crossbeat")
def cli() -> None:
    """crossbeat moves object data between storage sites."""


def main() -> None:
    """Console-script entry point."""
    cli()
