"""Safe file I/O: the output guard, input paths, what a file holds."""
