"""Precision locks: decisions as reviewable artefacts.

- :mod:`~ampconfig.lock.record`: a lock from a rewrite (and a run's proof), and the flags that decide again;
- :mod:`~ampconfig.lock.causes` and :mod:`~ampconfig.lock.drift`: two locks compared, each change with its cause;
- :mod:`~ampconfig.lock.check`: ``lock --check``: decide again with the recorded settings, compare.

The file format itself is :mod:`ampconfig.documents.lock_file`; a model's structural fingerprint and weights
hash, which value ranges files record too, :mod:`ampconfig.model_io.identity`. This package sits above ``prove`` (a
lock can record a run's proof) and below ``report`` and ``cli``.
"""
