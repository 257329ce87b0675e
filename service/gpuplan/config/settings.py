"""Service settings: environment variables over an optional config file.

Every setting has one name, the field name below. In the environment it is spelt
``GPUPLAN_<NAME>`` (``GPUPLAN_MAX_BODY_BYTES``); in a config file (TOML, YAML or JSON,
named by ``GPUPLAN_CONFIG`` or ``gpuplan serve --config``) it is the bare field name.
The environment wins over the file, so a container can override one value of a
mounted file. Anything invalid or unknown stops start-up with a message naming the
setting and where it came from: a service that starts with a typo in its Redis URL
silently runs without its fleet view, which is worse than one that refuses to start.
"""

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from gpuplan.config.documents import DocumentError, read_document
from gpuplan.core.errors import DataError, field_error
from gpuplan.core.record import Record

ENV_PREFIX = "GPUPLAN_"
CONFIG_ENV = "GPUPLAN_CONFIG"

LogLevel = Literal["debug", "info", "warning", "error", "critical"]

MiB = 1024 * 1024
MIN_TOKEN_LENGTH = 16
"""Shorter bearer tokens are refused at start-up: they can be guessed."""


class Settings(Record):
    """Validated settings of one API process."""

    host: Annotated[str, msgspec.Meta(min_length=1, max_length=255)] = "127.0.0.1"
    """Address to listen on; the container image sets ``0.0.0.0``."""

    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 8000
    """TCP port to listen on."""

    workers: Annotated[int, msgspec.Meta(ge=1, le=64)] = 1
    """Server worker processes. One per pod is the Kubernetes norm; scale with replicas."""

    redis_url: Annotated[str, msgspec.Meta(max_length=2048)] | None = None
    """``redis://``, ``rediss://`` or ``unix://`` URL of the fleet store; unset runs without it."""

    redis_timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=30)] = 0.5
    """Connect and command timeout for Redis, so a dead Redis cannot stall a request."""

    max_body_bytes: Annotated[int, msgspec.Meta(ge=1024, le=256 * MiB)] = 1 * MiB
    """Largest request body accepted; larger bodies answer 413."""

    log_level: LogLevel = "info"
    """Threshold of the service's logs."""

    catalog_file: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None
    """A catalog file (TOML, YAML or JSON) that adds SKUs or overrides fields."""

    fleet_key_prefix: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] = "gpuplan:v1:"
    """Prefix of the fleet's Redis keys; the agents' ``--key-prefix`` must match."""
    trace_timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 120.0
    """Wall-time limit of one ``POST /v1/memory/trace``; its worker is killed past it."""

    trace_probe_budget_bytes: Annotated[int, msgspec.Meta(ge=0, le=64 * 1024 * MiB)] = 256 * MiB
    """Runtime ``cpu`` traces run a CPU kernel that allocates inside a call (oneDNN
    convolutions, LSTMs) once for real when its tensors fit in this many bytes, to
    measure that scratch; 0: never (the worker then needs no real tensor memory)."""

    trace_max_concurrent: Annotated[int, msgspec.Meta(ge=1, le=64)] = 1
    """Traces running at once in one server process; more answer 503."""

    trace_cache_ttl_seconds: Annotated[int, msgspec.Meta(ge=0, le=365 * 86400)] = 7 * 86400
    """How long Redis keeps a trace result (0: no caching)."""

    trace_cache_prefix: Annotated[str, msgspec.Meta(min_length=1, max_length=128)] = (
        "gpuplan:trace:"
    )
    """Prefix of the Redis keys of cached trace results."""

    job_queue: bool = False
    """Run traces on ``gpuplan worker`` processes through the job queue in Redis (needs
    ``redis_url``): the API then never imports torch, and ``Prefer: respond-async``
    answers 202 with a job to poll. Off: traces run in a subprocess of the server, and
    ``Prefer: respond-async`` is ignored (RFC 7240): the trace answers 200 when done."""

    job_queue_prefix: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9:_.-]{1,100}$")] = (
        "gpuplan:jobs:"
    )
    """Prefix of the job queues' names in Redis; the workers' ``--queue-prefix`` must match."""

    job_result_ttl_seconds: Annotated[int, msgspec.Meta(ge=1, le=30 * 86400)] = 3600
    """How long a finished job's answer stays readable at ``GET /v1/jobs/{id}``; after
    that the job is ``expired`` (a trace's result stays in the trace cache longer)."""

    api_tokens: Annotated[str, msgspec.Meta(max_length=65536)] | None = None
    """Bearer tokens that may call ``/v1`` (comma or whitespace separated); unset with no
    ``api_tokens_file``: no authentication (the default, for a private network)."""

    api_tokens_file: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None
    """A file of bearer tokens, one per line (a mounted Kubernetes secret); read at start-up."""

    protect_operations: bool = False
    """Also require a token for ``/healthz``, ``/readyz``, ``/metrics`` and ``/schema``."""

    cors_allow_origins: Annotated[str, msgspec.Meta(max_length=8192)] | None = None
    """Origins allowed to call from a browser (comma separated, ``*`` for any); unset: CORS off."""

    redis_password_file: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None
    """A file holding the Redis password (a mounted secret), used over one in the URL."""

    planning_timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=600)] = 10.0
    """Compute-time limit of one planning request (estimate, recommendation, MIG layout
    check or plan, CI plan); past it 503."""

    answer_cache_bytes: Annotated[int, msgspec.Meta(ge=0, le=4096 * MiB)] = 16 * MiB
    """Memory for remembered planning answers (estimates, recommendations, MIG layouts)
    per worker: a repeated request body is answered without computing again; 0: off."""

    shutdown_timeout_seconds: Annotated[int, msgspec.Meta(ge=1, le=3600)] = 25
    """After SIGTERM, how long a worker may finish its in-flight requests before it is
    killed. Keep it under the orchestrator's grace period (Kubernetes: 30 s by default),
    so the pod stops by itself rather than by SIGKILL."""


class SettingsError(DataError):
    """A setting is invalid or unknown; the message names it and its source."""


_FIELDS: tuple[str, ...] = Settings.__struct_fields__
_ENV_NAMES = {ENV_PREFIX + name.upper(): name for name in _FIELDS}

# Variables with our prefix that are not settings of the API and must not be
# reported as unknown: the config file selector, the agent's and the job worker's own
# settings, and the
# service links Kubernetes injects for a Service named ``gpuplan``.
_IGNORED_ENV = re.compile(
    r"^GPUPLAN_(CONFIG|AGENT_\w*|WORKER_\w*|SERVICE_\w+|PORT_\d+_(TCP|UDP|SCTP)\w*)$"
)
_SERVICE_LINK = re.compile(r"^(tcp|udp|sctp)://")
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
_OPTIONAL_STRINGS = frozenset(
    {
        "redis_url",
        "catalog_file",
        "api_tokens",
        "api_tokens_file",
        "cors_allow_origins",
        "redis_password_file",
    }
)


def load_settings(environ: Mapping[str, str], config_path: str | Path | None = None) -> Settings:
    """Build settings from ``environ`` over the config file, if any.

    ``config_path`` wins over ``GPUPLAN_CONFIG``. Raises :class:`SettingsError`.
    """
    path: str | Path | None = config_path
    if path is None:
        path = environ.get(CONFIG_ENV) or None
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if path is not None:
        for name, value in _read_config_file(Path(path)).items():
            values[name] = value
            origin[name] = f"`{name}` in {path}"
    for env_name, value in environ.items():
        if not env_name.startswith(ENV_PREFIX) or _IGNORED_ENV.match(env_name):
            continue
        field = _ENV_NAMES.get(env_name)
        if field is None:
            raise SettingsError(f"unknown setting {env_name}{_suggest(env_name, _ENV_NAMES)}")
        values[field] = _from_env(field, value)
        origin[field] = env_name
    try:
        settings = msgspec.convert(values, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(_explain(exc, values, origin)) from None
    _check(settings, origin)
    return settings


def _from_env(name: str, value: str) -> Any:
    """Turn an environment string into the value the field expects."""
    if name in _OPTIONAL_STRINGS:
        return value or None  # an empty variable means "none", as in Helm values
    if name == "log_level":
        return value.lower()
    return value


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        data = read_document(path)
    except DocumentError as exc:
        raise SettingsError(f"config file {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path} must hold a mapping of settings")
    for key in data:
        if key not in _FIELDS:
            raise SettingsError(f"unknown setting `{key}` in {path}{_suggest(str(key), _FIELDS)}")
    return data


def _explain(
    exc: msgspec.ValidationError, values: Mapping[str, Any], origin: Mapping[str, str]
) -> str:
    """Name the setting behind a msgspec error such as ``Expected `int` >= 1 - at `$.port```."""
    where, message = field_error(exc)
    name = where.removeprefix("$.").split(".")[0].split("[")[0]
    got = values.get(name)
    shown = _redact(got) if name == "redis_url" and isinstance(got, str) else got
    if name == "api_tokens":
        shown = "***"  # a secret never reaches a log
    text = f"invalid setting {origin.get(name, name)}: {message}, got {shown!r}"
    if name == "port" and _SERVICE_LINK.match(str(values.get(name))):
        # Kubernetes injects GPUPLAN_PORT=tcp://… into pods when a Service is named gpuplan.
        text += (
            "; this looks like a Kubernetes service link: set enableServiceLinks: false "
            "on the pod, or set GPUPLAN_PORT explicitly"
        )
    return text


def api_tokens(settings: Settings) -> frozenset[str]:
    """The bearer tokens of ``api_tokens`` and ``api_tokens_file`` together.

    Raises :class:`SettingsError` when the file cannot be read or holds no token: a
    service meant to be locked must not start unlocked because a secret was not mounted.
    """
    tokens = set((settings.api_tokens or "").replace(",", " ").split())
    if settings.api_tokens_file is not None:
        try:
            text = Path(settings.api_tokens_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(
                f"invalid setting api_tokens_file: cannot read {settings.api_tokens_file}: "
                f"{exc.__class__.__name__}"
            ) from None
        from_file = {line.strip() for line in text.splitlines() if line.strip()}
        if not from_file:
            raise SettingsError(
                f"invalid setting api_tokens_file: {settings.api_tokens_file} holds no token"
            )
        tokens |= from_file
    short = [t for t in tokens if len(t) < MIN_TOKEN_LENGTH]
    if short:
        raise SettingsError(
            f"invalid setting api_tokens: every token needs at least {MIN_TOKEN_LENGTH} "
            f"characters ({len(short)} shorter)"
        )
    return frozenset(tokens)


def redis_password(settings: Settings) -> str | None:
    """The password of ``redis_password_file``, if set; raises :class:`SettingsError`."""
    if settings.redis_password_file is None:
        return None
    try:
        return Path(settings.redis_password_file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(
            f"invalid setting redis_password_file: cannot read {settings.redis_password_file}: "
            f"{exc.__class__.__name__}"
        ) from None


def _check(settings: Settings, origin: Mapping[str, str]) -> None:
    """Rules a type cannot express."""
    api_tokens(settings)
    redis_password(settings)
    url = settings.redis_url
    if settings.job_queue and url is None:
        source = origin.get("job_queue", "job_queue")
        raise SettingsError(
            f"invalid setting {source}: the job queue lives in Redis; set GPUPLAN_REDIS_URL too"
        )
    if url is not None and not url.startswith(_REDIS_SCHEMES):
        source = origin.get("redis_url", "redis_url")
        raise SettingsError(
            f"invalid setting {source}: expected a URL starting with "
            f"{', '.join(_REDIS_SCHEMES)}, got {_redact(url)!r}"
        )


def _redact(url: str) -> str:
    """Hide a password in a URL before it reaches a log or a terminal."""
    return re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", url)


def _suggest(name: str, choices: Any) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""
