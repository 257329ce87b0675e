"""The HTTP adapter: a Litestar app over the planning core (:mod:`gpuplan.api.app`), and
the server runner (:mod:`gpuplan.api.server`).

Nothing is imported here: the runner must be importable without the app, whose metrics
library has to wait until the runner has chosen its store for several workers.
"""
