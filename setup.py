"""Packages for setuptools: every ``ampconfig*`` package, plus the data folders at the repository root mapped into
the package (``ops_info/`` -> ``ampconfig/ops_info``, ``schemas/`` -> ``ampconfig/schemas``). The rest of the
configuration is pyproject.toml's; tests/test_packaging.py builds the wheel and checks what it carries."""

from setuptools import find_packages, setup

DATA_FOLDERS = {"ampconfig.ops_info": "ops_info", "ampconfig.schemas": "schemas"}

setup(packages=[*find_packages(include=["ampconfig*"]), *DATA_FOLDERS], package_dir=DATA_FOLDERS)
