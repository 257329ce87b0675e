"""The planner page and the API reference in a real browser: Debian's Chromium, driven by
Playwright (``executable_path``; Playwright downloads no browser), against a real
``gpuplan serve``. The page must draw the API's own figures, take a new plan from its
forms, and never make a request outside the service's origin.

Screenshots (1280×800) are kept under ``.artifacts/ui/`` (``GPUPLAN_UI_ARTIFACTS``
overrides); docs/ui.md shows copies of them. Skipped only where no Chromium is installed.
"""

import json
import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, sync_playwright

from tests.helpers import TINY_LLAMA
from tests.test_serve import serving

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = os.environ.get("GPUPLAN_CHROMIUM") or next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
)
if CHROMIUM is None:
    pytest.skip(
        "no Chromium installed (apt-get install chromium; .ci/run does): the browser tests need one",
        allow_module_level=True,
    )

ARTIFACTS = Path(
    os.environ.get("GPUPLAN_UI_ARTIFACTS", Path(__file__).parent.parent / ".artifacts" / "ui")
)
VIEWPORT = {"width": 1280, "height": 800}
# A fresh profile that talks to nothing but the page: no updates, sync or field trials.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
]
GIB = 1024**3

PLAN = (
    "/ui?view=memory&model=llama-3.1-8b&mode=finetune_qlora&batch_size=2&sequence_length=4096"
    "&gradient_checkpointing=full&gpu=l4-24gb&objective=fastest&training_tokens=500000000"
    "&mig_gpu=h100-sxm5-80gb&mw=llm:35:2&mw=notebook:1g.10gb:3"
)
JOB: dict[str, Any] = {
    "model": {"name": "llama-3.1-8b"},
    "workload": {
        "mode": "finetune_qlora",
        "batch_size": 2,
        "sequence_length": 4096,
        "gradient_checkpointing": "full",
    },
}
MIG = {
    "gpu": "h100-sxm5-80gb",
    "workloads": [
        {"name": "llm", "memory_gib": 35, "count": 2},
        {"name": "notebook", "profile": "1g.10gb", "count": 3},
    ],
}


def _post(base: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        base + path, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


class Watched:
    """A page with every request, console error, page error and CSP violation recorded."""

    def __init__(self, browser: Browser, base: str) -> None:
        self.base = base
        self.context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
        self.page: Page = self.context.new_page()
        self.requests: list[str] = []
        self.posted: dict[str, list[Any]] = {}
        """The JSON bodies the page POSTed, by path."""
        self.errors: list[str] = []
        self.page.add_init_script(
            "document.addEventListener('securitypolicyviolation', e =>"
            " console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI))"
        )
        self.page.on("request", self._request)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))

    def _request(self, request: Request) -> None:
        self.requests.append(request.url)
        if request.method == "POST":
            self.posted.setdefault(urlsplit(request.url).path, []).append(request.post_data_json)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def open(self, path: str) -> None:
        self.page.goto(self.base + path)
        self.ready()

    def ready(self) -> None:
        self.page.wait_for_selector("body[data-ready=true]", timeout=30_000)

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path

    def check_clean(self) -> None:
        """Nothing left the origin, and nothing failed or was blocked."""
        strangers = [url for url in self.requests if not url.startswith(self.base + "/")]
        assert not strangers, strangers
        assert not self.errors, self.errors
        self.context.close()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving() as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def watched(browser: Browser, server: str) -> Iterator[Watched]:
    w = Watched(browser, server)
    yield w
    w.check_clean()


def _check_memory(page: Page, answer: dict[str, Any]) -> None:
    chart = page.get_by_test_id("memory-chart")
    legend = {
        item.get_attribute("data-field"): int(item.get_attribute("data-bytes") or "-1")
        for item in chart.locator(".legend li").all()
    }
    # The framework overhead is the sum of the four fields after it: not a bar of its own.
    aggregate = {"framework_overhead_bytes"} if "context_bytes" in answer["breakdown"] else set()
    parts = {k: v for k, v in answer["breakdown"].items() if v > 0 and k not in aggregate}
    headroom = answer["required_bytes"] - sum(parts.values())
    assert legend == {**parts, "headroom": headroom}
    bars = chart.locator("rect.part")
    assert bars.count() == len(legend)
    fit = answer["fit"]
    usable = chart.locator("line.limit")
    assert int(usable.get_attribute("data-bytes") or "-1") == fit["usable_memory_bytes"]
    verdict = page.locator("#verdict").inner_text()
    assert verdict.startswith("Fits" if fit["fits"] else "Does not fit")
    assert _gib(fit["required_bytes"]) in verdict
    assert _gib(fit["usable_memory_bytes"]) in verdict
    # The text alternative: a table with the same bytes.
    rows = chart.locator("#memory-table tbody tr")
    assert rows.count() == len(legend) + 2  # the parts, required, usable
    for field, value in legend.items():
        cell = chart.locator(f'#memory-table tr[data-field="{field}"] td').first
        assert cell.text_content() == str(value)


def _check_ranking(page: Page, answer: dict[str, Any]) -> None:
    table = page.get_by_test_id("gpu-table")
    rows = table.locator("tbody tr")
    shown = [
        (r.get_attribute("data-gpu"), int(r.get_attribute("data-count") or 0)) for r in rows.all()
    ]
    assert shown == [(c["gpu"], c["count"]) for c in answer["recommendations"]]
    for row, candidate in zip(rows.all(), answer["recommendations"], strict=True):
        for key in ("required_bytes_per_gpu", "time_hours", "cost_usd", "score"):
            value = row.locator(f'[data-key="{key}"]').get_attribute("data-value")
            expected = candidate[key]
            assert (value in (None, "") and expected is None) or float(value or 0) == expected, key
    plotted = [
        c
        for c in answer["recommendations"]
        if c["fits"] and (c["time_hours"] or 0) > 0 and (c["cost_usd"] or 0) > 0
    ]
    dots = page.get_by_test_id("gpu-scatter").locator("circle.dot")
    assert dots.count() == len(plotted)
    drawn = {
        (d.get_attribute("data-gpu"), int(d.get_attribute("data-count") or 0)): (
            float(d.get_attribute("data-x") or 0),
            float(d.get_attribute("data-y") or 0),
        )
        for d in dots.all()
    }
    assert drawn == {(c["gpu"], c["count"]): (c["time_hours"], c["cost_usd"]) for c in plotted}


def _check_mig(page: Page, answer: dict[str, Any]) -> None:
    layout = page.get_by_test_id("mig-layout")
    for gpu in answer["gpus"]:
        group = layout.locator(f'g[data-gpu-index="{gpu["index"]}"]')
        instances = [
            (
                i.get_attribute("data-workload"),
                i.get_attribute("data-profile"),
                int(i.get_attribute("data-start") or -1),
                int(i.get_attribute("data-size") or -1),
            )
            for i in group.locator("g.instance").all()
        ]
        assert instances == [
            (i["workload"], i["profile"], i["start"], i["size"]) for i in gpu["instances"]
        ]
    assert layout.locator("g[data-gpu-index]").count() == answer["gpus_used"]
    assert page.locator("#mig-yaml").text_content() == answer["mig_parted_config"]


def test_a_shared_plan_draws_the_apis_figures(watched: Watched, server: str) -> None:
    page = watched.page
    watched.open(PLAN)
    estimate = _post(server, "/v1/memory/estimate", {**JOB, "gpu": "l4-24gb"})
    asked = {
        **JOB,
        "objective": "fastest",
        "constraints": {"preferred_gpu": "l4-24gb"},
        "training": {"training_tokens": 500_000_000},
    }
    # The page asks for advice on the GPU of its fit.
    assert watched.posted["/v1/recommendations"] == [asked]
    ranking = _post(server, "/v1/recommendations", asked)
    mig = _post(server, "/v1/mig/plan", MIG)

    _check_memory(page, estimate)
    assert ranking["advice_gpu"] == "l4-24gb"
    items = page.locator("#advice li")
    assert items.count() == max(len(ranking["advice"]), 1)
    if ranking["advice"]:
        changes = [i.get_attribute("data-change") for i in items.all()]
        assert changes == [a["change"] for a in ranking["advice"]]
        assert {i.get_attribute("data-gpu") for i in items.all()} == {"l4-24gb"}
    else:
        assert "fits one l4-24gb" in items.first.inner_text()
    assert "l4-24gb" in page.locator("#advice-for").inner_text()
    watched.shot("memory")

    page.get_by_role("tab", name="GPUs").click()
    assert page.get_by_test_id("gpu-table").is_visible()
    assert "view=gpus" in page.url
    # No global batch in the plan: the recipe's default, and its warning, are shown.
    warnings = page.locator("#ranking-warnings li")
    assert [w.inner_text() for w in warnings.all()] == ranking["warnings"]
    assert any(w.startswith("no global batch stated") for w in ranking["warnings"])
    _check_ranking(page, ranking)
    watched.shot("gpus")

    # Sorting by the keyboard: the cost heading, then Enter.
    page.locator('#gpu-table thead button[data-key="cost_usd"]').focus()
    page.keyboard.press("Enter")
    costs = [
        float(v)
        for v in page.locator('#gpu-table tbody [data-key="cost_usd"]').evaluate_all(
            "cells => cells.map(c => c.dataset.value)"
        )
        if v not in ("", None)
    ]
    assert costs == sorted(costs)
    assert page.locator("#gpu-table th[aria-sort=ascending]").inner_text().startswith("cost")

    # The tabs follow the arrow keys.
    page.get_by_role("tab", name="GPUs").focus()
    page.keyboard.press("ArrowRight")
    assert page.get_by_role("tab", name="MIG").get_attribute("aria-selected") == "true"
    _check_mig(page, mig)
    watched.shot("mig")


def test_the_forms_make_a_new_plan_and_its_link(watched: Watched, server: str) -> None:
    page = watched.page
    watched.open(PLAN)
    page.get_by_label("batch size", exact=True).fill("8")
    page.get_by_label("GPU for the fit").select_option("h100-sxm5-80gb")
    page.get_by_label("Global batch (sequences per step)").fill("64")
    page.get_by_role("button", name="Plan", exact=True).click()
    page.wait_for_url("**batch_size=8**")
    watched.ready()
    query = parse_qs(urlsplit(page.url).query)
    assert query["batch_size"] == ["8"]
    assert query["gpu"] == ["h100-sxm5-80gb"]
    assert query["global_batch_size"] == ["64"]
    sent = watched.posted["/v1/recommendations"][-1]
    assert sent["constraints"] == {"preferred_gpu": "h100-sxm5-80gb"}
    assert sent["training"] == {"training_tokens": 500_000_000, "global_batch_size": 64}
    job = {**JOB, "workload": {**JOB["workload"], "batch_size": 8}}
    _check_memory(page, _post(server, "/v1/memory/estimate", {**job, "gpu": "h100-sxm5-80gb"}))

    page.get_by_role("tab", name="MIG").click()
    page.get_by_role("button", name="Add a workload").click()
    page.locator("#mig-rows tr").last.locator("input").nth(0).fill("batch")
    page.locator("#mig-rows tr").last.locator("input").nth(1).fill("2g.20gb")
    page.locator("#mig-rows tr").last.locator("input").nth(2).fill("2")
    page.get_by_role("button", name="Plan MIG").click()
    page.wait_for_url("**mw=batch**")
    watched.ready()
    mig = {
        **MIG,
        "workloads": [*MIG["workloads"], {"name": "batch", "profile": "2g.20gb", "count": 2}],
    }
    _check_mig(page, _post(server, "/v1/mig/plan", mig))

    # The link opens the same plan again, in a new page.
    link = page.url
    again = watched.context.new_page()
    again.goto(link)
    again.wait_for_selector("body[data-ready=true]", timeout=30_000)
    assert again.locator("#mig-yaml").text_content() == page.locator("#mig-yaml").text_content()
    again.close()


@pytest.mark.torch
def test_a_pasted_config_draws_its_traced_step(watched: Watched, server: str) -> None:
    page = watched.page
    query = urlencode(
        {
            "view": "memory",
            "config": json.dumps(TINY_LLAMA),
            "mode": "training",
            "batch_size": 2,
            "sequence_length": 128,
            "gpu": "l4-24gb",
            "training_tokens": 1_000_000,
            "trace": 1,
            "t.batch_size": 2,
            "t.sequence_length": 128,
        }
    )
    page.goto(f"{server}/ui?{query}")
    page.wait_for_selector("body[data-ready=true]", timeout=120_000)
    assert json.loads(page.locator("#config").input_value()) == TINY_LLAMA
    assert page.locator("#trace").is_checked()
    traced = _post(
        server,
        "/v1/memory/trace",
        {"model": {"hf_config": TINY_LLAMA}, "workload": {"batch_size": 2, "sequence_length": 128}},
    )
    drawn = {
        label.get_attribute("data-phase"): int(label.get_attribute("data-bytes") or -1)
        for label in page.get_by_test_id("memory-chart").locator("#timeline .phase-bytes").all()
    }
    assert drawn == {k: v for k, v in traced["phases"].items() if v > 0}
    assert _gib(traced["peak_bytes"]) in page.locator("#timeline h3").inner_text()
    estimate = _post(
        server,
        "/v1/memory/estimate",
        {
            "model": {"hf_config": TINY_LLAMA},
            "workload": {"mode": "training", "batch_size": 2, "sequence_length": 128},
            "gpu": "l4-24gb",
        },
    )
    _check_memory(page, estimate)
    watched.shot("memory-traced")


def test_without_a_plan_the_page_shows_the_worked_example(watched: Watched) -> None:
    page = watched.page
    page.goto(watched.base + "/")  # redirects to /ui
    watched.ready()
    assert urlsplit(page.url).path == "/ui"
    assert page.locator("#model").input_value() == "llama-3.1-8b"
    assert page.get_by_test_id("memory-chart").locator("rect.part").count() > 3
    page.get_by_role("tab", name="MIG").click()
    assert page.get_by_test_id("mig-layout").locator("g.instance").count() >= 5
    assert "a100" in (page.locator("#mig-summary").text_content() or "")


def test_the_api_reference_works_offline(watched: Watched) -> None:
    page = watched.page
    page.goto(watched.base + "/schema")
    page.wait_for_selector(".opblock", timeout=30_000)
    assert page.locator(".opblock").count() > 15
    watched.shot("reference")


def test_with_api_tokens_the_page_asks_for_one(browser: Browser) -> None:
    token = "planner-token-0123456789abcdef"
    with serving(settings={"GPUPLAN_API_TOKENS": token}) as base:
        w = Watched(browser, base)
        page = w.page
        page.goto(base + "/ui")
        page.get_by_label("API token").wait_for(timeout=30_000)
        assert "401" in " ".join(w.errors)  # the refused calls, shown in the console
        page.get_by_label("API token").fill(token)
        page.get_by_role("button", name="Use token").click()
        w.ready()
        assert page.locator("#problem").is_hidden()
        assert page.get_by_test_id("memory-chart").locator("rect.part").count() > 3
        assert token not in page.url  # kept in the tab, never in the link
        # The calls before the token was given were refused (401s in the console); the
        # drawn chart and the empty problem box show that the calls after it were not.
        w.errors = [e for e in w.errors if "status of 401" not in e]
        w.check_clean()
