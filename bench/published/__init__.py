"""Published, measured GPU runs: the speed model's calibration and its independent check."""
