"""Prometheus exposition: counts and latency by route template and status."""

from typing import Any

from litestar import Litestar
from litestar.testing import TestClient
from prometheus_client.parser import text_string_to_metric_families


def _samples(client: TestClient[Litestar]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _labels(**labels: Any) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


def test_requests_are_counted_by_template_and_status(client: TestClient[Litestar]) -> None:
    for _ in range(3):
        client.get("/healthz")
    client.get("/v1/version")
    client.get("/no/such/route/42")
    client.get("/no/such/route/43")
    client.delete("/healthz")
    samples = _samples(client)
    count = "gpuplan_http_requests_total"
    assert samples[(count, _labels(method="GET", route="/healthz", status=200))] == 3
    assert samples[(count, _labels(method="GET", route="/v1/version", status=200))] == 1
    # Unmatched paths share one label: a client cannot grow the series count.
    assert samples[(count, _labels(method="GET", route="unmatched", status=404))] == 2
    assert samples[(count, _labels(method="DELETE", route="unmatched", status=405))] == 1
    assert not any("/no/such" in str(labels) for _, labels in samples)
    hist = "gpuplan_http_request_duration_seconds_count"
    assert samples[(hist, _labels(method="GET", route="/healthz", status=200))] == 3
    assert (
        samples[
            ("gpuplan_build_info", _labels(version=client.get("/v1/version").json()["version"]))
        ]
        == 1
    )


def test_unknown_methods_share_a_label(client: TestClient[Litestar]) -> None:
    client.request("BREW", "/healthz")
    samples = _samples(client)
    assert any(dict(labels).get("method") == "other" for _, labels in samples)


def test_apps_do_not_share_counts(client: TestClient[Litestar]) -> None:
    # The fixture builds a fresh app: nothing counted by the other tests shows here.
    samples = _samples(client)
    assert (
        "gpuplan_http_requests_total",
        _labels(method="GET", route="/healthz", status=200),
    ) not in samples
