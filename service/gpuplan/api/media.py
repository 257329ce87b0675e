"""Which request bodies are JSON, decided in one place for every layer that asks."""

JSON_MEDIA_TYPE = "application/json"


def is_json(media_type: str) -> bool:
    """``application/json`` or a structured ``application/*+json`` type (RFC 6839), given
    lower-cased and without parameters."""
    return media_type == JSON_MEDIA_TYPE or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )
