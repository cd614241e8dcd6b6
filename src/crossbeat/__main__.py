"""`python -m crossbeat` runs the CLI."""

from crossbeat.cli.main import main

main()
