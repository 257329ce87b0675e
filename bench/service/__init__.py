"""The service as a deployment runs it: HTTP throughput and latency, the ASGI server,
pod memory, mixed load, schema fuzzing and the trace job queue, each against a real
``gpuplan serve`` or worker on loopback."""
