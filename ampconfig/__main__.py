"""``python -m ampconfig``: the same command line as the ``ampconfig`` script."""

from ampconfig.cli import main

main()
