"""Safe file I/O: input paths checked, files read bounded, every output written through the guard, interrupts that
unwind what was written; what a file holds from its first bytes, content digests, and where the data folders are."""
