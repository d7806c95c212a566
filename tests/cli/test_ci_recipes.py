"""The CI recipes the repository ships: every `ampconfig` command of the GitHub Actions workflow
(examples/ci/precision-check.yml) runs on the bundled example as the workflow runs it, passes on an unchanged tree
and fails on a mixlist edit naming the line; the `ampconfig-lock` pre-commit hook checks the locks a commit
touches; the README's recipes for calibration on many machines (a CI matrix, Ray) run, and their merged ranges
give the rewrite one calibration over all the data gives."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ampconfig.examples import DEFAULT_EXAMPLE, example_path
from tests.lock_trees import Tree, cli, example_tree, line_of, working_directory

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
WORKFLOW = ROOT / "examples" / "ci" / "precision-check.yml"
HOOKS = ROOT / ".pre-commit-hooks.yaml"
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def _steps() -> list[dict]:
    return [step for job in _workflow()["jobs"].values() for step in job["steps"]]


def _commands() -> list[str]:
    """Each line of a `run:` step that runs ampconfig (the workflow keeps one command per line)."""
    lines = [line.strip() for step in _steps() for line in step.get("run", "").splitlines()]
    return [line for line in lines if line.startswith("ampconfig ")]


def _shell_line(line: str, env: dict[str, str]) -> tuple[int, str]:
    """One command line as bash runs it, for the constructs the workflow uses: $VARIABLES, `> FILE`, `>> FILE`
    and a trailing `|| true`. Anything else fails here, so the workflow stays this simple."""
    tolerant = line.endswith("|| true")
    line = line.removesuffix("|| true").strip()
    tokens = shlex.split(_VARIABLE.sub(lambda match: env[match.group(1)], line))
    redirect = None
    if len(tokens) > 2 and tokens[-2] in (">", ">>"):
        redirect, tokens = (tokens[-2], tokens[-1]), tokens[:-2]
    assert tokens[0] == "ampconfig" and not {"|", "&&", ";", ">", ">>"} & set(tokens), line
    result = cli(*tokens[1:])
    if redirect is not None and redirect[1] != "/dev/null":
        with open(redirect[1], "a" if redirect[0] == ">>" else "w", encoding="utf-8") as handle:
            handle.write(result.stdout)
    return (0 if tolerant else result.exit_code), result.stdout


def _project(root: Path) -> Tree:
    """The layout the workflow expects: models/session.yaml naming the model and its mixlist, and the lock."""
    tree = example_tree(root)
    tree.config.write_text(
        "precision_mode: allow_mix_precision\nmodel: model.onnx\nmodify_mixlist: mixlist.json\n", encoding="utf-8"
    )
    with working_directory(root):
        assert cli("lock", "--config", "models/session.yaml", "-o", "models/precision.lock.json").exit_code == 0
    return tree


def test_the_workflow_runs_validate_lock_check_and_uploads_the_explain_html() -> None:
    commands = _commands()
    assert any(command.startswith("ampconfig validate") for command in commands)
    assert sum(command.startswith("ampconfig lock --check") for command in commands) == 2
    explain = next(command for command in commands if command.startswith("ampconfig explain"))
    html = shlex.split(explain)[shlex.split(explain).index("--html") + 1]
    uploads = [step for step in _steps() if step.get("uses", "").startswith("actions/upload-artifact")]
    assert [step["with"]["path"] for step in uploads] == [html]
    assert all(step.get("if") == "always()" for step in uploads)


def test_the_workflow_commands_pass_on_an_unchanged_tree_and_fail_on_a_mixlist_edit(tmp_path: Path) -> None:
    tree = _project(tmp_path)
    summary = tmp_path / "summary.md"
    env = {**_workflow()["env"], "GITHUB_STEP_SUMMARY": str(summary)}
    with working_directory(tmp_path):
        for command in _commands():
            code, _ = _shell_line(command, env)
            assert code == 0, command
        assert (tmp_path / "precision-explain.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
        assert "no decision changed" in summary.read_text(encoding="utf-8")
        tree.write_mixlist({"black-list": {"to-add": ["Softmax", "Erf"]}})
        results = {command: _shell_line(command, env) for command in _commands() if "lock --check" in command}
    github = next(output for command, (code, output) in results.items() if "github" in command)
    assert [code for code, _ in results.values()] == [0, 1]  # the summary line tolerates the failure, not the other
    assert f"::error file=models/mixlist.json,line={line_of(tree.mixlist, 'Erf')}," in github
    erf = [node["name"] for node in json.loads(tree.lock.read_text(encoding="utf-8"))["nodes"]].index("mlp.gelu/Erf")
    assert f"| `mlp.gelu/Erf` at `$.nodes[{erf}]` | Erf | float16 -> float32 |" in summary.read_text(encoding="utf-8")


def _hook(name: str) -> dict:
    hooks = yaml.safe_load(HOOKS.read_text(encoding="utf-8"))
    return next(hook for hook in hooks if hook["id"] == name)


def test_the_validate_hook_leaves_the_workflow_and_the_locks_alone() -> None:
    pattern = re.compile(_hook("ampconfig-validate")["files"])
    assert not pattern.search("examples/ci/precision-check.yml")
    assert not pattern.search(".github/workflows/precision-check.yml")
    assert not pattern.search("models/precision.lock.json")
    assert pattern.search("models/mixlist.json")


@pytest.mark.parametrize(
    ("touched", "code"),
    [("models/mixlist.json", 1), ("models/precision.lock.json", 1), ("README.md", 0)],
)
def test_the_lock_hook_checks_the_locks_a_commit_touches(tmp_path: Path, touched: str, code: int) -> None:
    hook = _hook("ampconfig-lock")
    pattern = re.compile(hook["files"])
    for name in ("models/model.onnx", "models/model.onnx.data", "models/mixlist.json", "models/session.yaml",
                 "models/keep_dtype.cfg", "models/precision.lock.json"):  # fmt: skip
        assert pattern.search(name), name
    assert hook["pass_filenames"] is True
    tree = _project(tmp_path)
    (tmp_path / "README.md").write_text("# a project\n", encoding="utf-8")
    tree.write_mixlist({"black-list": {"to-add": ["Softmax", "Erf"]}})
    entry = shlex.split(hook["entry"])
    assert entry[0] == "ampconfig"
    with working_directory(tmp_path):
        result = cli(*entry[1:], touched)
    assert result.exit_code == code, result.output
    if code:
        assert f"models/mixlist.json:{line_of(tree.mixlist, 'Erf')}: error:" in result.stdout
    else:
        assert "no precision lock" in result.stdout


# ------------------------------------------------------------------ calibration on many machines (issue 36)
def _readme_block(language: str, after: str) -> str:
    """The README's first ``language`` block after the text ``after``."""
    from tests.test_readme import readme_blocks

    text = README.read_text(encoding="utf-8")
    start = text.count("\n", 0, text.index(after)) + 1
    return next(block.text for block in readme_blocks() if block.language == language and block.line > start)


def _calibration_project(root: Path) -> Path:
    """The README's project as the recipes need it: models/model.onnx (the bundled example) and the calibration
    set the README's stand-in block writes."""
    root.mkdir(parents=True)
    (root / "models").mkdir()
    shutil.copyfile(example_path(DEFAULT_EXAMPLE), root / "models" / "model.onnx")
    data = _readme_block("python", "A stand-in for your calibration set")
    done = subprocess.run([sys.executable, "-c", data], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return root


def _whole_rewrite(project: Path, merged: Path) -> None:
    """One calibration over all the data gives the same values as the merged shards, and rewrite --ranges the
    same bytes."""
    with working_directory(project):
        assert (
            cli("calibrate", "models/model.onnx", "--calibration-data", "calibration", "-o", "whole.json").exit_code
            == 0
        )
        for ranges, out in (("whole.json", "from-whole.onnx"), (str(merged), "from-merged.onnx")):
            assert cli("rewrite", "models/model.onnx", "--ranges", ranges, "-o", out).exit_code == 0
    whole = json.loads((project / "whole.json").read_text(encoding="utf-8"))
    shards = json.loads(merged.read_text(encoding="utf-8"))
    assert shards["values"] == whole["values"] and shards["data"]["samples"] == whole["data"]["samples"] == 8
    assert len(shards["data"]["shards"]) == 4
    assert {key: shards["model"][key] for key in ("structure_sha256", "weights_sha256")} == {
        key: whole["model"][key] for key in ("structure_sha256", "weights_sha256")
    }
    assert (merged.parent / shards["model"]["path"]).resolve() == (project / "models" / "model.onnx").resolve()
    assert (project / "from-merged.onnx").read_bytes() == (project / "from-whole.onnx").read_bytes()


def test_the_ci_matrix_recipe_runs_as_its_jobs_would(tmp_path: Path) -> None:
    project = _calibration_project(tmp_path / "project")
    workflow = yaml.safe_load(_readme_block("yaml", "**A CI matrix**"))
    shard_job, merge_job = workflow["jobs"]["shard"], workflow["jobs"]["merge"]
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    for shard in shard_job["strategy"]["matrix"]["shard"]:  # each job on a machine of its own: a fresh checkout
        job = tmp_path / f"job-{shard}"
        shutil.copytree(project, job)
        for step in shard_job["steps"]:
            line = step.get("run", "").replace("${{ matrix.shard }}", str(shard))
            if line.startswith("ampconfig "):
                with working_directory(job):
                    assert cli(*shlex.split(line)[1:]).exit_code == 0, line
            elif step.get("uses", "").startswith("actions/upload-artifact"):
                uploaded = step["with"]["path"].replace("${{ matrix.shard }}", str(shard))
                shutil.copyfile(job / uploaded, artifacts / Path(uploaded).name)
    merge = tmp_path / "merge"
    shutil.copytree(project, merge)
    for step in merge_job["steps"]:
        if step.get("uses", "").startswith("actions/download-artifact"):
            for artifact in artifacts.iterdir():
                shutil.copyfile(artifact, merge / artifact.name)
        elif step.get("run", "").startswith("ampconfig "):
            with working_directory(merge):
                assert cli(*shlex.split(step["run"])[1:]).exit_code == 0, step["run"]
    _whole_rewrite(merge, merge / "models" / "ranges.json")


@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None and not os.environ.get("CI"),
    reason="the Ray recipe needs the ray extra (pip install '.[ray]'); CI installs it and never skips this",
)
def test_the_ray_recipe_runs_against_a_local_ray(tmp_path: Path) -> None:
    project = _calibration_project(tmp_path / "project")
    recipe = _readme_block("python", "**Ray**")
    done = subprocess.run(
        [sys.executable, "-c", recipe], cwd=project, capture_output=True, text=True, timeout=300, env=_ray_env()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    _whole_rewrite(project, project / "models" / "ranges.json")


def _ray_env() -> dict[str, str]:
    """The recipe as a user runs it, with a small local instance: no dashboard, no usage report."""
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_DOCKER_CPU_WARNING": "1"}
