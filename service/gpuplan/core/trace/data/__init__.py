"""The trace cost predictor's measured table (cost.toml)."""
