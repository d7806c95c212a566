"""Where ampconfig's data folders are: ``ops_info/`` and ``schemas/``, at the repository root as the shared design
card lays the project out (beside ``ampconfig/``, ``tests/`` and ``pyproject.toml``).

Run from a source checkout (the source tree on ``sys.path``, or an editable install), they are the checkout's own
folders. A built wheel carries them inside the package (``setup.py`` maps ``ampconfig.ops_info`` to ``ops_info/``
and ``ampconfig.schemas`` to ``schemas/``), so an installed ampconfig finds them at ``ampconfig/ops_info`` and
``ampconfig/schemas`` in site-packages. Commands that regenerate them (``schema --write``, ``ops-info probe``)
write into a checkout only: an installed package is never written to.
"""

from __future__ import annotations

import re
from pathlib import Path

#: The folder of the ampconfig package that is running (in a checkout: the source tree's ``ampconfig/``).
PACKAGE_DIR = Path(__file__).resolve().parent.parent
OPS_INFO = "ops_info"
SCHEMAS = "schemas"
_PROJECT_NAME = re.compile(r'^name\s*=\s*["\']ampconfig["\']\s*$', re.MULTILINE)


def checkout_root(package_dir: Path | None = None) -> Path | None:
    """The source checkout ampconfig runs from, or None when it runs from an installed package: a checkout's
    ``pyproject.toml`` sits next to the package folder and names the project ampconfig."""
    package = package_dir if package_dir is not None else PACKAGE_DIR
    try:
        text = (package.parent / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return package.parent if _PROJECT_NAME.search(text) else None


def source_data_dir(name: str, package_dir: Path | None = None) -> Path | None:
    """The checkout's data folder ``name`` (``ops_info``, ``schemas``), or None when ampconfig runs from an
    installed package (or the checkout lacks it)."""
    root = checkout_root(package_dir)
    folder = root / name if root is not None else None
    return folder if folder is not None and folder.is_dir() else None


def data_dir(name: str, package_dir: Path | None = None) -> Path:
    """The data folder ``name`` ampconfig reads: the checkout's when it runs from one, else the one the wheel put
    inside the package (which may be missing from a broken installation: readers say so)."""
    package = package_dir if package_dir is not None else PACKAGE_DIR
    return source_data_dir(name, package) or package / name
