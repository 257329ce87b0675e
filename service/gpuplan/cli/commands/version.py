"""``gpuplan version``: the version, from the one place it is kept."""

import click

from gpuplan import __version__


@click.command("version")
def version_command() -> None:
    """Print the version."""
    click.echo(__version__)
