"""One recorded request and answer per operation (``<operationId>.json``), shown in the
OpenAPI document and in docs/api-examples.md.

Recorded from the running app by ``python -m tests.examples``; a test recomputes each
deterministic answer and fails when a file no longer matches what the service says.
"""
