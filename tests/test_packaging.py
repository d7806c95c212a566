"""The design card's layout (issue 23): ops_info/ and schemas/ at the repository root, carried by the wheel into
the package, and used by an installed (non-editable) ampconfig, which never writes into itself.

Builds the real wheel with pip (build isolation: setuptools from the package index or pip's cache, as CI's
``pip install .`` does), from a copy of the sources in a temporary folder so the checkout gets no build/ or
egg-info. About 10-20 s; marked ``packaging`` (``-m "not packaging"`` leaves it out locally; CI runs it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ampconfig.settings.json_schemas import SCHEMA_KINDS

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "setup.py", "README.md", "ampconfig", "ops_info", "schemas")

pytestmark = pytest.mark.packaging


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(work / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = (work / "dist").glob("ampconfig-*.whl")
    return path


def test_the_repository_has_ops_info_and_schemas_at_its_root() -> None:
    assert sorted(p.name for p in (ROOT / "ops_info").glob("*.json")) == ["cpu.json", "cuda.json"]
    names = sorted(path.name for path in (ROOT / "schemas").glob("*.schema.json"))
    assert names == sorted(kind.filename for kind in SCHEMA_KINDS.values())
    assert not (ROOT / "ampconfig" / "ops_info").exists() and not (ROOT / "ampconfig" / "schemas").exists()


def test_the_wheel_carries_the_data_folders_and_every_module(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("ops_info", "schemas"):
        for file in (ROOT / folder).glob("*.json"):
            assert f"ampconfig/{folder}/{file.name}" in names, file
    modules = {str(p.relative_to(ROOT)).replace(os.sep, "/") for p in (ROOT / "ampconfig").rglob("*.py")}
    assert modules - names == set()  # a subpackage setup.py's find_packages missed would show here
    assert {"ampconfig/examples/small_convnet.onnx", "ampconfig/examples/transformer_block.onnx"} <= names
    assert not any(name.startswith(("ops_info/", "schemas/", "tests/")) for name in names)


def test_an_installed_package_uses_its_own_data_and_never_writes_into_itself(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-compile",
            "--quiet",
            "--target",
            str(site),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # The interpreter running the tests has the dependencies; the installed copy comes first on the path, and the
    # working folder is not the checkout (python -c would put it first otherwise).
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = (
        "import json, ampconfig\n"
        "from ampconfig.opinfo.library import load_ops_info\n"
        "from ampconfig.settings.json_schemas import packaged_schema_dir, source_schema_dir\n"
        "print(json.dumps({'package': ampconfig.__file__, 'cuda': load_ops_info('cuda').source,\n"
        "    'schemas': str(packaged_schema_dir()), 'source_schemas': source_schema_dir()}))\n"
    )
    found = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    where = json.loads(found.stdout)
    package = site / "ampconfig"
    assert Path(where["package"]).parent == package
    assert Path(where["cuda"]) == package / "ops_info" / "cuda.json"
    assert Path(where["schemas"]) == package / "schemas" and where["source_schemas"] is None

    def ampconfig(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ampconfig", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    lists = ampconfig("lists", "--target", "cpu", "--json")
    assert lists.returncode == 0, lists.stderr
    assert "MatMul" in json.loads(lists.stdout)["white"] + json.loads(lists.stdout)["gray"]
    before = {p: p.read_bytes() for p in package.rglob("*.json")}
    schema = ampconfig("schema", "--write")
    assert schema.returncode == 2 and "installed package" in schema.stderr
    strategy = ampconfig("ops-info", "apply-strategy", "--target", "cuda")
    assert strategy.returncode == 2 and "installed package" in strategy.stderr and "-o FILE" in strategy.stderr
    assert {p: p.read_bytes() for p in package.rglob("*.json")} == before
