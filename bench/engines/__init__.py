"""Serving engines' own parsers against the launch commands serving plans emit
(docs/serving.md)."""
