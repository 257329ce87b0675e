"""Cloud price tables, one TOML file a provider (read by ``core.catalog.builtin``)."""
