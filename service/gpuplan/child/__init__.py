"""Running a piece of work in a child process that cannot outlive its caller.

The agent's benchmark and the API's trace both hand a JSON request to a fresh Python
process and read its answer: CUDA contexts, OOM kills and hung kernels stay in the
child. What must not differ between them is the discipline around it: a child past
its time, or one whose caller went away (a cancelled task: client gone, server or
agent shutting down), is killed and reaped, never left holding a GPU or a CPU for
nobody.
"""

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import NamedTuple


class Finished(NamedTuple):
    """A child that exited by itself: its exit status and what it wrote."""

    returncode: int
    stdout: bytes
    stderr: bytes


async def run_child(
    command: Sequence[str], stdin: bytes, *, env: Mapping[str, str], timeout_seconds: float
) -> Finished | None:
    """Run ``command`` with ``stdin`` on its standard input; ``None`` when it ran past
    ``timeout_seconds`` and was killed. A cancelled caller kills it too, then re-raises."""
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(stdin), timeout_seconds)
    except (TimeoutError, asyncio.CancelledError) as stopped:
        with contextlib.suppress(ProcessLookupError):  # it may have exited meanwhile
            process.kill()
        await process.wait()
        if isinstance(stopped, asyncio.CancelledError):
            raise
        return None
    assert process.returncode is not None  # communicate() returns once the child exited
    return Finished(process.returncode, stdout, stderr)
