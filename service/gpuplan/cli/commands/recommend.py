"""``gpuplan recommend``: the recommendation from flags or a YAML/JSON/TOML request file.

The file has exactly the shape of the ``POST /v1/recommendations`` body; flags set or
override single fields of it, so a CI job can keep one request file and vary the
objective on the command line. Errors name the field (as the API's problem+json does)
and exit 2.
"""

from pathlib import Path
from typing import Any

import click

from gpuplan.cli.context import catalog, catalog_option
from gpuplan.cli.errors import reported
from gpuplan.cli.options import RequestOptions, output_format
from gpuplan.cli.render import candidates as render
from gpuplan.cli.render.output import MACHINE_FORMATS, machine, write
from gpuplan.core.errors import InvalidRequest
from gpuplan.core.recommend.schema import RecommendRequest

OPTIONS = RequestOptions(RecommendRequest)


@click.command("recommend")
@OPTIONS.options
@catalog_option
@output_format("table", *MACHINE_FORMATS)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help=f"Print every candidate of the answer, not only the top {render.TOP} (the table; "
    "JSON and YAML always hold the whole answer, at most --limit).",
)
def recommend_command(fmt: str, catalog_file: Path | None, show_all: bool, **values: Any) -> None:
    """Rank catalog GPUs and counts for a job by fit, time, cost and energy.

    The table shows the top 10 and says how many more there are (--all prints them);
    --format json or yaml prints the API's whole answer, for scripts.

    \b
    Examples:
      gpuplan recommend --model llama-2-7b --mode inference --seq-len 4096 --rps 2
      gpuplan recommend --model llama-2-70b --mode training --seq-len 4096 \\
          --checkpointing full --tokens 1e9 --objective cheapest
      gpuplan recommend -f request.yaml --objective fastest --format json
    """
    from gpuplan.core.recommend import recommend

    with reported("recommend", values["request_file"]):
        response = recommend(_request(values), catalog(catalog_file))
    if fmt == "table":
        write(render.table(response, top=None if show_all else render.TOP))
    else:
        write(machine(response, fmt))


def _request(values: dict[str, Any]) -> RecommendRequest:
    try:
        request: RecommendRequest = OPTIONS.request(values)
    except InvalidRequest as exc:
        if any(path == "$.targets" for path, _ in exc.errors):
            hint = "a plan file's targets: check them with `gpuplan plan FILE`"
            exc.errors = [(p, f"{r} ({hint})" if p == "$.targets" else r) for p, r in exc.errors]
        raise
    return request
