"""MIG planning against exact answers: the planner vs an integer program, an independent
plan checker (the tests use it too), and the usable-memory model vs the captures
(docs/mig.md quotes them)."""
