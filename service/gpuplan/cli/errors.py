"""Errors to exit codes: the one mapping every command uses.

Exit codes are the contract with CI: 0 success (every target passes, a valid layout),
1 a check that ran and failed (a target, a layout, a trace that could not run), 2 input
that cannot be used (each offending field named by its JSONPath, as the API's problem
does), 3 a server the command needs cannot be reached or failed.
"""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import click

from gpuplan.core.errors import DataError, GpuplanError, InvalidRequest, NotFound
from gpuplan.core.names import did_you_mean

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_UNAVAILABLE = 0, 1, 2, 3


class Unavailable(GpuplanError):
    """A server the command needs cannot be reached, or failed (exit 3)."""


def fail(command: str, message: str, code: int) -> NoReturn:
    click.echo(f"gpuplan {command}: {message}", err=True)
    sys.exit(code)


@contextmanager
def reported(command: str, source: object = None) -> Iterator[None]:
    """Run a command's work; turn gpuplan's errors into a message and an exit code.

    ``source`` (a file, a URL) says where the input came from.
    """
    try:
        yield
    except InvalidRequest as exc:
        where = f" in {source}" if source is not None else ""
        lines = "\n".join(f"{path}: {reason}" for path, reason in exc.errors)
        fail(command, f"invalid input{where}:\n{lines}", EXIT_INVALID)
    except NotFound as exc:
        fail(command, f"no such name: {exc.query!r}{did_you_mean(exc.suggestions)}", EXIT_INVALID)
    except DataError as exc:
        fail(command, str(exc), EXIT_INVALID)
    except Unavailable as exc:
        fail(command, str(exc), EXIT_UNAVAILABLE)
    except GpuplanError as exc:
        fail(command, str(exc), EXIT_FAILED)
