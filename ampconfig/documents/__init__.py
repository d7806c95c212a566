"""File formats and their readers: every file a user writes or ampconfig writes for them, read bounded and located.

The documents themselves (JSON, YAML, TOML: ``documents``, ``document_limits``, ``bounded_yaml``), the session
config, the mixlist (with TensorFlow's mixed-precision env lists), keep_dtype and customize_dtypes files, the
precision lock, the value ranges file, Ascend's ops info, and what they share (the tolerance, the numeric settings'
ranges, the ``format`` tags). Below the settings, which merge what these files say with the command line."""
