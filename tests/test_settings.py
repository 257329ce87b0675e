"""Settings: environment over file, and start-up refused with the setting named."""

import json
from pathlib import Path

import pytest

from gpuplan.config.settings import Settings, SettingsError, load_settings


def test_defaults_without_environment() -> None:
    assert load_settings({}) == Settings()
    assert Settings().max_body_bytes == 1024 * 1024


def test_environment_values_are_converted() -> None:
    settings = load_settings(
        {
            "GPUPLAN_HOST": "0.0.0.0",
            "GPUPLAN_PORT": "9000",
            "GPUPLAN_REDIS_URL": "redis://cache:6379/1",
            "GPUPLAN_MAX_BODY_BYTES": "65536",
            "GPUPLAN_LOG_LEVEL": "DEBUG",
            "HOME": "/root",  # unrelated variables are not ours to judge
        }
    )
    assert settings.host == "0.0.0.0"
    assert settings.port == 9000
    assert settings.redis_url == "redis://cache:6379/1"
    assert settings.max_body_bytes == 65536
    assert settings.log_level == "debug"


def test_empty_redis_url_means_no_redis() -> None:
    assert load_settings({"GPUPLAN_REDIS_URL": ""}).redis_url is None


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"GPUPLAN_PORT": "0"}, "GPUPLAN_PORT"),
        ({"GPUPLAN_PORT": "eighty"}, "GPUPLAN_PORT"),
        ({"GPUPLAN_MAX_BODY_BYTES": "-5"}, "GPUPLAN_MAX_BODY_BYTES"),
        ({"GPUPLAN_LOG_LEVEL": "loud"}, "GPUPLAN_LOG_LEVEL"),
        ({"GPUPLAN_REDIS_URL": "http://cache:6379"}, "GPUPLAN_REDIS_URL"),
        ({"GPUPLAN_REDIS_TIMEOUT_SECONDS": "0"}, "GPUPLAN_REDIS_TIMEOUT_SECONDS"),
        ({"GPUPLAN_SHUTDOWN_TIMEOUT_SECONDS": "0"}, "GPUPLAN_SHUTDOWN_TIMEOUT_SECONDS"),
        ({"GPUPLAN_SHUTDOWN_TIMEOUT_SECONDS": "2.5"}, "GPUPLAN_SHUTDOWN_TIMEOUT_SECONDS"),
    ],
)
def test_invalid_setting_names_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        load_settings(env)


def test_unknown_variable_is_refused_with_a_suggestion() -> None:
    with pytest.raises(SettingsError, match=r"GPUPLAN_REDIS_ULR.*did you mean GPUPLAN_REDIS_URL"):
        load_settings({"GPUPLAN_REDIS_ULR": "redis://x"})


def test_kubernetes_service_links_are_ignored_or_explained() -> None:
    links = {
        "GPUPLAN_SERVICE_HOST": "10.0.0.1",
        "GPUPLAN_SERVICE_PORT": "80",
        "GPUPLAN_PORT_80_TCP": "tcp://10.0.0.1:80",
        "GPUPLAN_PORT_80_TCP_ADDR": "10.0.0.1",
        "GPUPLAN_AGENT_INTERVAL": "10",
    }
    assert load_settings(links) == Settings()
    with pytest.raises(SettingsError, match="enableServiceLinks"):
        load_settings({**links, "GPUPLAN_PORT": "tcp://10.0.0.1:80"})


def test_redis_password_is_not_echoed() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({"GPUPLAN_REDIS_URL": "http://user:hunter2@cache:6379"})
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_config_file_under_environment(tmp_path: Path, suffix: str) -> None:
    values = {"port": 9100, "log_level": "warning", "max_body_bytes": 4096}
    path = tmp_path / f"gpuplan{suffix}"
    if suffix == ".toml":
        path.write_text('port = 9100\nlog_level = "warning"\nmax_body_bytes = 4096\n')
    elif suffix == ".yaml":
        path.write_text("port: 9100\nlog_level: warning\nmax_body_bytes: 4096\n")
    else:
        path.write_text(json.dumps(values))
    settings = load_settings({"GPUPLAN_CONFIG": str(path), "GPUPLAN_PORT": "9200"})
    assert settings.port == 9200  # the environment wins
    assert settings.log_level == "warning"
    assert settings.max_body_bytes == 4096
    assert load_settings({}, config_path=path).port == 9100


def test_config_file_errors_name_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("port = 70000\n")
    with pytest.raises(SettingsError, match=r"`port` in .*bad\.toml"):
        load_settings({}, config_path=path)
    path.write_text("prot = 80\n")
    with pytest.raises(SettingsError, match=r"unknown setting `prot`.*did you mean port"):
        load_settings({}, config_path=path)
    path.write_text("port = \n")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings({}, config_path=path)
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings({}, config_path=tmp_path / "missing.toml")
    other = tmp_path / "settings.ini"
    other.write_text("[x]\n")
    with pytest.raises(SettingsError, match="unknown format"):
        load_settings({}, config_path=other)
