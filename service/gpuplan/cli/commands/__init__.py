"""One module per ``gpuplan`` command; each parses, calls the core (or config, or a
server) once, and renders. None imports the HTTP adapter except ``serve`` and
``openapi``, whose subject it is."""
