"""Benchmarks: planned in the agent, run by torch in a subprocess it can kill."""
