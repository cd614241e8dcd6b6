from click.testing import CliRunner

from crossbeat.cli.main import SUBCOMMANDS, cli


def test_help_lists_every_subcommand() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in ("gateway", "broker", "topology"):
        assert name in SUBCOMMANDS and name in result.output
