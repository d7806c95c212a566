"""The ``format`` values that tell ampconfig's own JSON files from other JSON, light enough for ``validate`` to
sniff a file's kind without loading the readers of those files."""

#: The ``format`` of a precision lock file (:mod:`ampconfig.documents.lock_file`).
LOCK_FORMAT = "ampconfig-precision-lock"
#: The ``format`` of a value ranges file (:mod:`ampconfig.documents.ranges_file`).
RANGES_FORMAT = "ampconfig-value-ranges"
