"""The child-process runner the agent's benchmark and the API's trace share."""

import asyncio
import os
import sys
import time

from gpuplan.child import Finished, run_child

ENV = dict(os.environ)


def test_the_child_reads_stdin_and_its_answer_and_status_come_back() -> None:
    code = "import sys; data = sys.stdin.read(); print(data.upper()); sys.exit(3)"
    finished = asyncio.run(
        run_child([sys.executable, "-c", code], b"plan", env=ENV, timeout_seconds=30)
    )
    assert finished == Finished(3, b"PLAN\n", b"")


def test_a_child_past_its_time_is_killed_and_none_comes_back() -> None:
    started = time.monotonic()
    finished = asyncio.run(
        run_child(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            b"",
            env=ENV,
            timeout_seconds=0.5,
        )
    )
    assert finished is None
    assert time.monotonic() - started < 30  # killed, not waited for
