"""``python -m gpuplan`` runs the command line, the same as the ``gpuplan`` script."""

from gpuplan.cli import main

if __name__ == "__main__":
    main()
