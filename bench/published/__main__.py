"""``python -m bench.published``: predicted vs measured for every published run."""

from bench.published.runs import main

main()
