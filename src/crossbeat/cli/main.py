"""The `crossbeat` command: a click group whose subcommands live one per module.

Subcommands are imported only when invoked, so `crossbeat topology …` never pays for
pyspark or uvicorn imports.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import click

from crossbeat.cli.rlimits import raise_open_files_limit
from crossbeat.errors import CrossbeatError

# name -> "module:attribute" of a click command or group
SUBCOMMANDS: dict[str, str] = {
    "gateway": "crossbeat.cli.gateway:gateway",
    "broker": "crossbeat.cli.broker:broker",
    "topology": "crossbeat.cli.topology:topology",
    "populate": "crossbeat.cli.populate:populate",
    "pipeline": "crossbeat.cli.pipeline:pipeline",
    "replication": "crossbeat.cli.replication:replication",
    "transactions": "crossbeat.cli.transactions:transactions",
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
    raise_open_files_limit()


def main() -> None:
    """Console-script entry point. Errors of the environment (a file or directory that cannot
    be used, an address in use, a configuration that is wrong) end the command with a
    one-line `Error:` and exit status 1, as click's own usage errors do, not a traceback;
    CROSSBEAT_DEBUG=1 shows the traceback. A `CROSSBEAT_…` variable that no setting reads
    is warned about first (see crossbeat.cli.environment)."""
    if any(name.upper().startswith("CROSSBEAT_") for name in os.environ):
        # imported only then: it loads every component's settings model
        from crossbeat.cli.environment import warnings

        for line in warnings(os.environ):
            click.echo(line, err=True)
    try:
        code = cli(standalone_mode=False)  # click's ctx.exit(n) comes back as n
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (OSError, CrossbeatError, UnicodeError) as exc:
        if os.environ.get("CROSSBEAT_DEBUG"):
            raise
        click.echo(f"Error: {_describe(exc)}", err=True)
        sys.exit(1)
    if isinstance(code, int) and code:
        sys.exit(code)


def _describe(exc: BaseException) -> str:
    """The error in one line, naming the file or address it concerns."""
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename if exc.filename is not None else ""
        return f"{exc.strerror}: {where}" if where else str(exc)
    return str(exc) or type(exc).__name__
