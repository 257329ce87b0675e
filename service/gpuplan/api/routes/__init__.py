"""HTTP routes: each parses its input, calls the core and serialises the result."""
