"""The base class of every request, response and data Struct.

One base keeps the wire rules in one place: unknown fields are an error (a typo in a
plan file must not be ignored silently), and fields are keyword-only so a Struct
reads the same in code as in JSON. Core functions treat Records as values and never
mutate one they were given (``msgspec.structs.replace`` makes a changed copy); the
Structs are not declared ``frozen`` because mypy's dataclass transform then demands
the flag be restated on every subclass.

msgspec inherits ``forbid_unknown_fields``, but ``kw_only`` covers only the fields of
the class that sets it: a subclass that puts a required field after one with a
default restates ``kw_only=True``.
"""

import msgspec


class Record(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A strictly validated msgspec Struct with keyword-only fields."""
