"""``python -m ampconfig``: the same command line as the ``ampconfig`` script."""

from ampconfig.entry import main

main()
