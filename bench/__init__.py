"""Reproducible benchmarks; see bench/README.md. Loopback only, bounded in time."""
