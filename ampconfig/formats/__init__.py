"""File formats and their readers: the documents users write (JSON, YAML, TOML, read bounded and located), the
precision lock, the value ranges file, TensorFlow's mixed-precision env lists, Ascend's ops info, and the tolerance the
config and the lock share. Below the settings, which read their files through them."""
