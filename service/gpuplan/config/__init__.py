"""Process configuration: the service's settings, the documents users hand us (TOML, YAML,
JSON) and the catalog a process runs with.

Adapters read these once, at start-up; the core never does (it takes what they built as
arguments).
"""
