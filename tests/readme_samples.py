"""README.md's `curl` samples and the output lines under them, recorded from the service.

    python -m tests.readme_samples     # re-record the `# ` lines under each sample

A sample is a `curl` command in README.md's shell block of requests (continued over
lines with a trailing backslash), piped through `head -c N` or `grep PATTERN` at most,
followed by the lines it prints, each as a `# ` comment. The samples run in order, as a
reader would type them, against one app with no Redis (what `gpuplan serve` answers on
a fresh start): `/metrics` counts the requests before it. The running Python's version
is the one thing that differs from machine to machine, so `python_version` is compared
masked. tests/test_readme_samples.py runs them and fails naming the sample and both
texts when the README drifts from the service.
"""

import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"```sh\n(curl -s http://127\.0\.0\.1:8000/healthz\n.*?)```\n", re.S)
"""The README's block of requests: the shell block that opens with the liveness probe."""

PYTHON_VERSION = re.compile(r'("python_version":")[^"]*(")')


@dataclass(frozen=True)
class Sample:
    command: str
    """The command as written, continuation lines joined."""

    lines: list[str]
    """The command's lines in the README."""

    output: list[str]
    """The `# ` lines under it, without the `# `."""


def block(text: str) -> re.Match[str]:
    match = BLOCK.search(text)
    assert match, "README.md lost its block of curl samples (it opens with /healthz)"
    return match


def samples(text: str) -> list[Sample]:
    """The samples of the README's block, in order."""
    found: list[Sample] = []
    command: list[str] = []
    output: list[str] = []
    for line in block(text)[1].splitlines():
        if line.startswith("# "):
            output.append(line[2:])
            continue
        if command and not command[-1].endswith("\\"):
            found.append(Sample(_joined(command), command, output))
            command, output = [], []
        command.append(line)
    if command:
        found.append(Sample(_joined(command), command, output))
    return found


def _joined(lines: list[str]) -> str:
    return " ".join(line.removesuffix("\\").strip() for line in lines)


def _stages(command: str) -> Iterator[list[str]]:
    """The pipeline's commands, each as its words."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars="|")
    lexer.whitespace_split = True
    stage: list[str] = []
    for word in lexer:
        if word == "|":
            yield stage
            stage = []
        else:
            stage.append(word)
    yield stage


def run(client: TestClient, command: str) -> str:  # type: ignore[type-arg]
    """What the sample's pipeline prints: curl's body, then each filter over it."""
    curl, *filters = _stages(command)
    assert curl[0] == "curl", f"a sample starts with curl: {command}"
    method, url, headers, body = "GET", "", {}, None
    words = iter(curl[1:])
    for word in words:
        if word == "-s":
            continue
        if word == "-X":
            method = next(words)
        elif word == "-H":
            name, _, value = next(words).partition(":")
            headers[name.strip()] = value.strip()
        elif word == "-d":
            body, method = next(words), "POST" if method == "GET" else method
        elif word.startswith("http"):
            url = word
        else:
            raise AssertionError(f"the samples' curl takes -s, -X, -H, -d and a URL, not {word!r}")
    path = url.removeprefix("http://127.0.0.1:8000")
    response = client.request(method, path, headers=headers, content=body)
    printed = response.content
    for stage in filters:
        if stage[:2] == ["head", "-c"]:
            printed = printed[: int(stage[2])]
        elif stage[0] == "grep":
            pattern = re.compile(stage[1])
            kept = [line for line in printed.decode().splitlines() if pattern.search(line)]
            printed = "".join(line + "\n" for line in kept).encode()
        else:
            raise AssertionError(f"the samples pipe into head -c or grep, not {stage[0]!r}")
    return printed.decode(errors="replace")


def printed_lines(printed: str) -> list[str]:
    """What a reader's terminal shows, line by line (curl adds no final newline)."""
    return printed.rstrip("\n").split("\n")


def masked(lines: list[str]) -> list[str]:
    return [PYTHON_VERSION.sub(r"\1…\2", line) for line in lines]


def client() -> TestClient:  # type: ignore[type-arg]
    return TestClient(create_app(Settings()))


def rerecorded(text: str) -> str:
    """README.md with every sample's output lines as the service prints them now."""
    out: list[str] = []
    with client() as app:
        for sample in samples(text):
            out += sample.lines
            out += ["# " + line for line in printed_lines(run(app, sample.command))]
    match = block(text)
    return text[: match.start(1)] + "\n".join(out) + "\n" + text[match.end(1) :]


def main() -> None:
    text = README.read_text(encoding="utf-8")
    new = rerecorded(text)
    README.write_text(new, encoding="utf-8")
    sys.stdout.write(f"recorded {len(samples(new))} samples in {README}\n")


if __name__ == "__main__":
    main()
