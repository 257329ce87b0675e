"""The planning core: pure, deterministic functions over msgspec Structs.

Nothing under this package does I/O, reads the clock or the environment, or imports
litestar, redis, prometheus_client or torch. Adapters (the API, the CLI, the agent)
parse their input into the Structs defined here, call one core function and
serialise its result, so every adapter gives the same answer for the same input.
"""
