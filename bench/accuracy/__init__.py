"""Accuracy of the memory estimator against real PyTorch steps (see docs/accuracy.md)."""
