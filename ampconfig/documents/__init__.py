"""The documents a user writes, or ampconfig writes for them, each read bounded and located.

JSON, YAML and TOML themselves (``parsing``: plain data with a source map, ``document_limits``, ``bounded_yaml``),
the session config, the mixlist (with TensorFlow's mixed-precision env lists), keep_dtype and customize_dtypes
files, the precision lock, the value ranges file, Ascend's ops info, and what they share (the tolerance, the
numeric settings' ranges, the ``format`` tags). Below the settings, which merge what these documents say with the
command line."""
