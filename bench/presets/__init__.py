"""Derivations of built-in preset figures (see derive_vision.py)."""
