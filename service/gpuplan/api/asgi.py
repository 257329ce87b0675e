"""The ASGI entry point servers import: ``gpuplan.api.asgi:app``.

Settings come from the environment (and ``GPUPLAN_CONFIG``), since each server worker
imports this module afresh.
"""

from gpuplan.api.app import create_app

app = create_app()
