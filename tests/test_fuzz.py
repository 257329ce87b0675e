"""Schema fuzzing: schemathesis generates requests from the committed ``api/openapi.yaml``.

Every operation of the spec is fuzzed, so a new endpoint is covered the moment its
spec is regenerated. The checks: no 5xx (the fleet routes run against a real Redis,
so their 503 would be a bug here), status codes, content types, headers and bodies
as documented, schema-invalid requests refused, and every error answered as
``application/problem+json``. ``positive_data_acceptance`` is left out on purpose:
a schema-valid body may still name an unknown GPU or preset, or give two of the
model's three forms, which the schema cannot express and the API rightly answers 422.

Every operation runs twice: against a server with Redis and against one without (the
fleet routes then answer 404 ``fleet-not-configured``), and ``not_a_server_error``
holds on both. ``POST /v1/memory/trace`` starts a subprocess per request (seconds
each), so it gets a handful of examples; a ``Prefer: respond-async`` among them is
ignored on these queue-less servers (RFC 7240), never refused with a 5xx. ``bench/service/fuzz.py`` runs the same
tests with many more examples (``GPUPLAN_FUZZ_EXAMPLES``, ``GPUPLAN_FUZZ_TRACE_EXAMPLES``).
"""

import atexit
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks as st_checks
from schemathesis.config import SchemathesisConfig

from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings
from tests.agent_fixtures import snapshot
from tests.conftest import RedisServer, _answers, forget_keys, fresh_prefix
from tests.helpers import publish_snapshots

pytestmark = [pytest.mark.slow, pytest.mark.fuzz]

SPEC = Path(__file__).parent.parent / "api" / "openapi.yaml"
EXAMPLES = int(os.environ.get("GPUPLAN_FUZZ_EXAMPLES", "100"))
TRACE_EXAMPLES = int(os.environ.get("GPUPLAN_FUZZ_TRACE_EXAMPLES", "2"))
DERANDOMIZE = os.environ.get("GPUPLAN_FUZZ_RANDOM") != "1"  # bench/service/fuzz.py explores anew
TRACE_PATH = "/v1/memory/trace"
PROBLEM = "application/problem+json"


def _redis_url() -> str:
    """The machine's Redis if it answers, else one of our own for this module's life."""
    shared = os.environ.get("GPUPLAN_FUZZ_REDIS_URL", "redis://127.0.0.1:6379/0")
    if _answers(shared):
        return shared
    server = RedisServer()
    server.start()
    atexit.register(server.stop)
    return server.url


REDIS_URL = _redis_url()
PREFIX = fresh_prefix("fuzz")

APP = create_app(
    Settings(
        redis_url=REDIS_URL,
        fleet_key_prefix=PREFIX,
        trace_cache_ttl_seconds=0,
        trace_timeout_seconds=60,
    )
)
# The same server without Redis, as the quick start runs it: the fleet routes answer
# 404 (no fleet here), `Prefer: respond-async` is ignored, and nothing is a 5xx.
APP_WITHOUT_REDIS = create_app(Settings(trace_cache_ttl_seconds=0, trace_timeout_seconds=60))


@pytest.fixture(scope="module", autouse=True)
def _fleet() -> Iterator[None]:
    """Two published nodes, so fleet answers are validated, not just empty lists; they
    (and what the fuzzed routes wrote) leave with the module. Published here, not at
    import, so a run that deselects these tests writes nothing."""
    publish_snapshots(REDIS_URL, PREFIX, snapshot("node-a"), snapshot("node-b"))
    yield
    forget_keys(REDIS_URL, PREFIX)


CHECKS = [
    st_checks.status_code_conformance,
    st_checks.content_type_conformance,
    st_checks.response_headers_conformance,
    st_checks.response_schema_conformance,
    st_checks.negative_data_rejection,
]

schema = schemathesis.openapi.from_path(SPEC)
# The trace: only generated examples (the explicit and coverage phases would send
# dozens of bodies, each a worker process).
_trace_config = SchemathesisConfig.from_dict({})
_trace_config.projects.default.phases.update(phases=["fuzzing"])
trace_schema = schemathesis.openapi.from_path(SPEC, config=_trace_config)
HEALTH = list(HealthCheck)


def _media_type(response: Any) -> str:
    value = response.headers.get("content-type", "")
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value).split(";")[0].strip()


def _validate(case: Any, response: Any) -> None:
    checks = [*CHECKS, st_checks.not_a_server_error]
    if response.status_code == 413:
        # A body over the size limit is refused before it is read; schemathesis does not
        # count 413 as rejecting a schema-violating body (its maxItems cases reach 1 MiB).
        checks = [c for c in checks if c is not st_checks.negative_data_rejection]
    case.validate_response(response, checks=checks)
    status = response.status_code
    assert status < 500, f"{status} for {case.method} {case.formatted_path}: {response.text[:300]}"
    if status >= 400:
        assert _media_type(response) == PROBLEM, (status, response.headers)
        body = response.json()
        assert body["status"] == status
        assert body["detail"], body


@schema.exclude(path=TRACE_PATH).parametrize()
@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=HEALTH, derandomize=DERANDOMIZE
)
def test_every_operation(case: Any) -> None:
    _validate(case, case.call(app=APP))


@schema.exclude(path=TRACE_PATH).parametrize()
@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=HEALTH, derandomize=DERANDOMIZE
)
def test_every_operation_without_redis(case: Any) -> None:
    _validate(case, case.call(app=APP_WITHOUT_REDIS))


@trace_schema.include(path=TRACE_PATH).parametrize()
@settings(
    max_examples=TRACE_EXAMPLES,
    deadline=None,
    suppress_health_check=HEALTH,
    derandomize=DERANDOMIZE,
)
def test_trace_operation(case: Any) -> None:
    _validate(case, case.call(app=APP))


@trace_schema.include(path=TRACE_PATH).parametrize()
@settings(
    max_examples=TRACE_EXAMPLES,
    deadline=None,
    suppress_health_check=HEALTH,
    derandomize=DERANDOMIZE,
)
def test_trace_operation_without_redis(case: Any) -> None:
    _validate(case, case.call(app=APP_WITHOUT_REDIS))
