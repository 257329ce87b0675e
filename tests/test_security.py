"""Auth and transport: bearer tokens, security headers, CORS, Redis password and TLS."""

import hmac
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict, Unpack

import httpx
import pytest
import redis
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.api.security import Guard
from gpuplan.config.settings import Settings, SettingsError, load_settings
from tests.conftest import free_port

TOKEN = "s3cret-token-0123456789abcdef"
OTHER = "another-token-abcdefghijklmnop"

ESTIMATE = {
    "model": {"parameters": 1_000_000_000},
    "workload": {"mode": "inference", "sequence_length": 1024},
}


class _SettingsArgs(TypedDict, total=False):
    """The settings these tests vary (each a field of ``Settings``)."""

    api_tokens: str
    cors_allow_origins: str
    protect_operations: bool
    redis_url: str


def _client(**settings: Unpack[_SettingsArgs]) -> TestClient[Litestar]:
    return TestClient(app=create_app(Settings(**settings)))


def _is_401(response: httpx.Response) -> None:
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.headers["www-authenticate"].startswith("Bearer")
    body = response.json()
    assert body["status"] == 401
    assert body["type"] == "urn:gpuplan:problem:unauthorized"
    assert "token" in body["detail"]


def test_without_tokens_the_api_is_open() -> None:
    with _client() as client:
        assert client.get("/v1/version").status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/version"), ("GET", "/v1/gpus"), ("POST", "/v1/memory/estimate"),
     ("GET", "/v1/nothing-here"), ("GET", "/v1/fleet/nodes")],
)  # fmt: skip
def test_with_tokens_v1_needs_one(method: str, path: str) -> None:
    with _client(api_tokens=f"{TOKEN},{OTHER}") as client:
        _is_401(client.request(method, path, json=ESTIMATE if method == "POST" else None))
        wrong = client.request(method, path, headers={"Authorization": "Bearer nope-nope-nope"})
        _is_401(wrong)
        assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
        _is_401(client.request(method, path, headers={"Authorization": f"Basic {TOKEN}"}))


def test_options_needs_a_token_unless_it_is_a_cors_preflight() -> None:
    preflight = {"Origin": "https://dash.example.com", "Access-Control-Request-Method": "POST"}
    with _client(api_tokens=TOKEN) as client:
        _is_401(client.options("/v1/memory/estimate"))
        _is_401(client.options("/v1/memory/estimate", headers=preflight))  # CORS is off
    with _client(api_tokens=TOKEN, cors_allow_origins="https://dash.example.com") as client:
        _is_401(client.options("/v1/memory/estimate"))
        assert client.options("/v1/memory/estimate", headers=preflight).status_code in (200, 204)


def test_a_valid_token_passes_and_each_configured_one_works() -> None:
    with _client(api_tokens=f"{TOKEN} {OTHER}") as client:
        for token in (TOKEN, OTHER):
            headers = {"Authorization": f"Bearer {token}"}
            assert client.get("/v1/version", headers=headers).status_code == 200
            answer = client.post("/v1/memory/estimate", json=ESTIMATE, headers=headers)
            assert answer.status_code == 200
        # An unknown path with a valid token is a plain 404: only now may the client learn it.
        headers = {"Authorization": f"bearer {TOKEN}"}
        assert client.get("/v1/nothing-here", headers=headers).status_code == 404


def test_operations_are_open_unless_protected() -> None:
    with _client(api_tokens=TOKEN) as client:
        for path in ("/healthz", "/readyz", "/metrics", "/schema/openapi.json"):
            assert client.get(path).status_code == 200, path
    with _client(api_tokens=TOKEN, protect_operations=True) as client:
        for path in ("/healthz", "/readyz", "/metrics", "/schema/openapi.json"):
            _is_401(client.get(path))
            headers = {"Authorization": f"Bearer {TOKEN}"}
            assert client.get(path, headers=headers).status_code == 200, path


def test_tokens_from_a_mounted_secret_file(tmp_path: Path) -> None:
    secret = tmp_path / "tokens"
    secret.write_text(f"\n{TOKEN}\n\n  {OTHER}  \n")
    settings = load_settings({"GPUPLAN_API_TOKENS_FILE": str(secret)})
    with TestClient(app=create_app(settings)) as client:
        _is_401(client.get("/v1/version"))
        ok = client.get("/v1/version", headers={"Authorization": f"Bearer {OTHER}"})
        assert ok.status_code == 200


def test_bad_token_settings_stop_start_up(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="api_tokens_file"):
        load_settings({"GPUPLAN_API_TOKENS_FILE": str(tmp_path / "missing")})
    empty = tmp_path / "empty"
    empty.write_text("\n\n")
    with pytest.raises(SettingsError, match="holds no token"):
        load_settings({"GPUPLAN_API_TOKENS_FILE": str(empty)})
    with pytest.raises(SettingsError, match="at least 16") as info:
        load_settings({"GPUPLAN_API_TOKENS": "short"})
    assert "short" not in str(info.value).replace("shorter", "")  # the secret is not echoed


def test_token_comparison_is_constant_time_over_all_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    guard = Guard([TOKEN, OTHER], protect_operations=False)
    assert guard.authorized(TOKEN.encode())
    assert len(compared) == 2  # no early exit at the first match
    assert not guard.authorized(b"x" * len(TOKEN))
    assert not guard.authorized(None)


def test_security_headers_on_every_answer() -> None:
    with _client() as client:
        for response in (
            client.get("/v1/version"),
            client.get("/v1/nothing"),
            client.post(
                "/v1/memory/estimate", content=b"{", headers={"content-type": "application/json"}
            ),
            client.get("/healthz"),
        ):
            headers = response.headers
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["cache-control"] == "no-store"
            assert headers["referrer-policy"] == "no-referrer"
            assert "default-src 'none'" in headers["content-security-policy"]
            assert "frame-ancestors 'none'" in headers["content-security-policy"]


def test_pages_load_nothing_from_another_host() -> None:
    # The planner and the API reference ship their scripts and styles in the package, so
    # their CSP admits the service's own origin and nothing else (no CDN, no inline code).
    with _client() as client:
        for path in ("/ui", "/schema", "/schema/swagger"):
            page = client.get(path)
            assert page.status_code == 200
            assert "http://" not in page.text, path
            assert "https://" not in page.text, path
            csp = page.headers["content-security-policy"]
            assert "default-src 'none'" in csp
            assert "script-src 'self';" in csp
            assert "style-src 'self';" in csp
            assert "connect-src 'self'" in csp
            assert "http" not in csp, csp
            assert "unsafe" not in csp, csp


def test_cors_is_off_by_default_and_configurable() -> None:
    origin = {"Origin": "https://dash.example.com"}
    with _client() as client:
        answer = client.get("/v1/version", headers=origin)
        assert "access-control-allow-origin" not in answer.headers
    with _client(cors_allow_origins="https://dash.example.com", api_tokens=TOKEN) as client:
        answer = client.get("/v1/version", headers={**origin, "Authorization": f"Bearer {TOKEN}"})
        assert answer.headers["access-control-allow-origin"] == "https://dash.example.com"
        preflight = client.options(
            "/v1/memory/estimate",
            headers={
                **origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert preflight.status_code in (200, 204)
        assert "POST" in preflight.headers["access-control-allow-methods"]
        stranger = client.get(
            "/v1/version",
            headers={"Origin": "https://evil.example", "Authorization": f"Bearer {TOKEN}"},
        )
        assert "access-control-allow-origin" not in stranger.headers


class _PasswordRedis:
    def __init__(self, password: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        self.port = free_port()
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--requirepass", password],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port, password=password, socket_timeout=0.5).ping()
                break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture
def password_redis() -> Iterator[_PasswordRedis]:
    server = _PasswordRedis("redis-pass-0123456789")
    try:
        yield server
    finally:
        server.stop()


def test_redis_with_a_password(password_redis: _PasswordRedis, tmp_path: Path) -> None:
    base = f"redis://127.0.0.1:{password_redis.port}/0"
    # No password: Redis refuses, the service degrades instead of failing.
    with _client(redis_url=base) as client:
        assert client.get("/readyz").json()["redis"] == "down"
        assert client.get("/v1/fleet/nodes").status_code == 503
    # Password in the URL.
    url = f"redis://:redis-pass-0123456789@127.0.0.1:{password_redis.port}/0"
    with _client(redis_url=url) as client:
        assert client.get("/readyz").json() == {"status": "ready", "redis": "ok"}
        assert client.get("/v1/fleet/nodes").status_code == 200
    # Password from a mounted secret file, over the URL's.
    secret = tmp_path / "redis-password"
    secret.write_text("redis-pass-0123456789\n")
    settings = load_settings(
        {"GPUPLAN_REDIS_URL": base, "GPUPLAN_REDIS_PASSWORD_FILE": str(secret)}
    )
    with TestClient(app=create_app(settings)) as client:
        assert client.get("/readyz").json()["redis"] == "ok"
        assert client.get("/v1/fleet/nodes").json()["count"] == 0


def _make_certificates(directory: Path) -> None:
    """A throwaway CA and a server certificate for 127.0.0.1, made with openssl."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "1", "-subj", "/CN=gpuplan-test-ca")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1")  # fmt: skip
    (directory / "ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "ext")  # fmt: skip


def test_rediss_url_speaks_verified_tls(tmp_path: Path) -> None:
    binary = shutil.which("redis-server")
    if binary is None or shutil.which("openssl") is None:
        pytest.skip("redis-server or openssl is not installed")
    _make_certificates(tmp_path)
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", "server.crt", "--tls-key-file", "server.key",
         "--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no", "--save", ""],
        cwd=tmp_path, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={tmp_path / 'ca.crt'}"
        deadline = time.monotonic() + 10
        with _client(redis_url=url) as client:
            while client.get("/readyz").json()["redis"] != "ok":
                if process.poll() is not None:
                    pytest.skip("this redis-server was built without TLS")
                assert time.monotonic() < deadline, "TLS Redis did not come up"
                time.sleep(0.1)
            assert client.get("/v1/fleet/nodes").status_code == 200
        # Without our CA the certificate does not verify: the service degrades, never
        # falls back to an unverified connection.
        with _client(redis_url=f"rediss://127.0.0.1:{port}/0") as client:
            assert client.get("/readyz").json()["redis"] == "down"
        # A plain client on the TLS port gets nothing either.
        with _client(redis_url=f"redis://127.0.0.1:{port}/0") as client:
            assert client.get("/readyz").json()["redis"] == "down"
    finally:
        process.terminate()
        process.wait(timeout=10)


# ------------------------------------------------------------------ no input is ever code

SERVICE = Path(__file__).parent.parent / "service" / "gpuplan"
# Loading a user's own Python file is what `gpuplan trace TARGET` (the CLI, on the user's
# machine) is for; no server module may reach it.
CLI_ONLY = {"trace/target.py"}


def test_no_module_evaluates_unpickles_or_imports_input() -> None:
    import ast

    banned_calls = {"eval", "exec", "compile", "__import__"}
    banned_modules = {"pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle"}
    found: list[str] = []
    for path in SERVICE.rglob("*.py"):
        rel = path.relative_to(SERVICE).as_posix()
        tree = ast.parse(path.read_text(), filename=rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if isinstance(func, ast.Name) and name in banned_calls:
                    found.append(f"{rel}:{node.lineno} {name}()")
                if name == "import_module" and rel not in CLI_ONLY:
                    found.append(f"{rel}:{node.lineno} import_module()")
                if name in ("load", "unsafe_load", "full_load") and isinstance(func, ast.Attribute) \
                        and getattr(func.value, "id", "") == "yaml":  # fmt: skip
                    found.append(f"{rel}:{node.lineno} yaml.{name}()")
                for keyword in node.keywords:
                    if (
                        keyword.arg in ("trust_remote_code", "shell")
                        and getattr(keyword.value, "value", False) is True
                    ):
                        found.append(f"{rel}:{node.lineno} {keyword.arg}=True")
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                )
                found += [
                    f"{rel}:{node.lineno} import {n}"
                    for n in names
                    if n.split(".")[0] in banned_modules
                ]
    assert not found, found


def test_no_server_module_imports_the_cli_target_loader() -> None:
    import ast

    for path in SERVICE.rglob("*.py"):
        rel = path.relative_to(SERVICE).as_posix()
        if rel.startswith("cli") or rel in CLI_ONLY:
            continue
        text = path.read_text()
        assert "gpuplan.trace.target" not in text, rel
        assert "import target" not in text, rel
    worker = ast.parse((SERVICE / "trace" / "worker.py").read_text())
    modules = {n.module for n in ast.walk(worker) if isinstance(n, ast.ImportFrom)}
    assert "gpuplan.trace.target" not in modules
