"""The fake-tensor tracer: what a trace costs (time, memory, operator calls) and how close
it comes to real steps and to the analytic estimate (docs/trace.md quotes them)."""
