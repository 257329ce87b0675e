"""The HTTP adapter: a Litestar app over the planning core."""

from gpuplan.api.app import create_app
from gpuplan.settings import Settings, SettingsError, load_settings

__all__ = ["Settings", "SettingsError", "create_app", "load_settings"]
