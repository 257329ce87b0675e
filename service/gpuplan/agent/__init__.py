"""The GPU agent sidecar: telemetry and benchmarks to Prometheus and Redis.

One process per node (a Kubernetes DaemonSet). Telemetry backends live in
:mod:`~gpuplan.agent.telemetry`, benchmarks in :mod:`~gpuplan.agent.bench`, the
exposition in :mod:`~gpuplan.agent.exporter`, Redis in
:mod:`~gpuplan.agent.publisher`, and the loop that ties them in
:mod:`~gpuplan.agent.loop`. Importing this package imports none of them.
"""
