"""``ampconfig rewrite``: decide every node's dtype and write the rewritten model (no ONNX Runtime session, except
for an input the ONNX checker rejects: see :mod:`ampconfig.runner.acceptance`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from ampconfig.api import rewrite_model_detailed
from ampconfig.cli.app import command
from ampconfig.cli.options import ConfigOpt, JsonOpt, KeepDtypeOpt, MixlistOpt
from ampconfig.cli.output import print_json, print_warning, stdout
from ampconfig.decide.decisions import RewriteResult
from ampconfig.errors import AmpconfigError
from ampconfig.files.guard import Destination, OutputGuard
from ampconfig.files.models import OpenedModel, open_model, save_model_atomic
from ampconfig.prove.request_files import declare_model, declare_model_output, role
from ampconfig.rewrite.tensors import LARGE_ARRAY_ELEMENTS

_HELP = """Rewrite MODEL for a precision mode and write the result to --output. Nothing is run: use
[bold]ampconfig run[/bold] to prove the result against fp32.

Flags override the session config (--config). Stale or contradictory value_info of the input (placeholder
shapes, wrong element types) is repaired in the copy that is rewritten, with a warning naming each value. The
written model has no onnx.checker.check_model(full_check=True) complaint that the input did not have: a
checker-clean input gives a checker-clean output, with no ONNX Runtime involved. An input the checker still
rejects is rewritten only when ONNX Runtime loads it, and written only after the output loaded and ran there.
Otherwise nothing is written and the exit code is 2.

No input is ever overwritten: an --output that is the same file as the model, its external data, the mixlist,
the keep_dtype file or the config (however the path is spelled: symlinks, .., hard links) is refused with exit 2
before any work. An existing --output is replaced atomically; a FIFO or character device such as /dev/null gets
the model as a stream (a model with external data cannot be streamed); a directory is refused.

Models with external data (any model over 2 GB) are read lazily, one weight at a time; the output's weights are
written to OUTPUT.data next to --output.

[bold]Examples[/bold]

  ampconfig rewrite model.onnx -o model.mixed.onnx --precision-mode allow_mix_precision

  ampconfig rewrite model.onnx -o model.fp16.onnx --precision-mode force_fp16 --target cuda

  ampconfig rewrite model.onnx -o out.onnx --precision-mode allow_mix_precision \\
      --modify-mixlist mixlist.json --keep-dtype keep_dtype.cfg

  ampconfig rewrite --config session.yaml --json
"""


_LIST_FILES = (("mixlist", "--modify-mixlist", "modify_mixlist"), ("keep_dtype file", "--keep-dtype", "keep_dtype"))


def _declare_files(
    guard: OutputGuard, settings: dict[str, Any], flags: dict[str, Any], config: Path | None
) -> tuple[OpenedModel, Destination]:
    """Every file this rewrite reads and writes, checked before any work: the output may be none of the inputs
    (model, its external data, mixlist, keep_dtype, config), nor may its external data file."""
    guard.read("session config (--config)", config)
    guard.read(role("input model", "MODEL", flags["model"], "model", config), settings["model"])
    for what, flag, key in _LIST_FILES:
        if isinstance(settings[key], Path):
            guard.read(role(what, flag, flags[key], key, config), settings[key])
    output_role = role("output model", "--output", flags["output"], "output", config)
    guard.output(output_role, settings["output"])  # refused before the model is even read
    opened = open_model(settings["model"])
    declare_model(guard, opened)
    return opened, declare_model_output(guard, Path(settings["output"]), output_role, opened)


def _settings(
    model: Path | None,
    output: Path | None,
    config_path: Path | None,
    precision_mode: str | None,
    modify_mixlist: Path | None,
    keep_dtype: Path | None,
    target: str | None,
    keep_io_types: bool | None,
) -> dict[str, Any]:
    """Flags over the config file; every required setting present or a clear error."""
    from ampconfig.settings.config import check_mode_accepts_mixlist, load_session_config

    config = load_session_config(config_path) if config_path is not None else None
    source = str(config_path) if config_path is not None else None
    if precision_mode is not None:
        mode = precision_mode
    elif config is not None:
        mode = config.resolved_mode(None).value
    else:
        raise AmpconfigError("no precision mode given", hint="pass --precision-mode MODE or set it in --config")
    settings: dict[str, Any] = {
        "model": model or (config.model if config else None),
        "output": output or (config.output if config else None),
        "precision_mode": mode,
        "modify_mixlist": modify_mixlist or (config.modify_mixlist if config else None),
        "keep_dtype": keep_dtype or (config.keep_dtype if config else None),
        "target": target or (config.target if config and config.target else "cpu"),
        "keep_io_types": keep_io_types if keep_io_types is not None else (config.keep_io_types if config else True),
    }
    if settings["model"] is None:
        raise AmpconfigError("no model given", file=source, hint="pass MODEL or set `model` in the config")
    if settings["output"] is None:
        raise AmpconfigError("no output path given", file=source, hint="pass -o OUT.onnx or set `output`")
    from ampconfig.settings.modes import parse_mode

    check_mode_accepts_mixlist(parse_mode(mode), settings["modify_mixlist"] is not None, source)
    return settings


def rewrite_summary(result: RewriteResult, model: Path, output: Path) -> dict[str, Any]:
    by_dtype = Counter(d.dtype for d in result.decisions if d.dtype is not None)
    changed = sum(1 for d in result.decisions if d.changed)
    return {
        "model": str(model),
        "output": str(output),
        "precision_mode": result.precision_mode,
        "target": result.target,
        "low_dtype": result.low_dtype,
        "nodes": len(result.decisions),
        "nodes_by_dtype": dict(sorted(by_dtype.items())),
        "nodes_changed": changed,
        "stats": result.stats.to_dict(),
        "warnings": result.warnings,
    }


def _print_summary(summary: dict[str, Any]) -> None:
    stdout.print(f"wrote {summary['output']}  ({summary['precision_mode']}, target {summary['target']})")
    table = Table(title=None, show_header=True)
    table.add_column("what")
    table.add_column("count", justify="right")
    for dtype, count in summary["nodes_by_dtype"].items():
        table.add_row(f"nodes computing in {dtype}", str(count))
    table.add_row("nodes whose dtype changed", str(summary["nodes_changed"]))
    for key, value in summary["stats"].items():
        if value:
            table.add_row(key.replace("_", " "), str(value))
    stdout.print(table)


def _float16_by_onnx_runtime(array: np.ndarray) -> np.ndarray:
    """Large weights go through ONNX Runtime's Cast kernel (10-20x numpy's cast; bit-identical): the command line
    loads onnxruntime for that, only once a large weight is converted. The library's default stays numpy."""
    if array.size < LARGE_ARRAY_ELEMENTS:
        return array.astype(np.float16)
    from ampconfig.runner.float_cast import float32_to_float16

    return float32_to_float16(array)


@command("rewrite", help=_HELP)
def rewrite(
    model: Annotated[Path | None, typer.Argument(help="Input ONNX model (default: the config's model).")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Where to write the rewritten model.")] = None,
    config: ConfigOpt = None,
    precision_mode: Annotated[
        str | None, typer.Option("--precision-mode", "-m", help="Precision mode (v1 name or v2 alias).")
    ] = None,
    modify_mixlist: MixlistOpt = None,
    keep_dtype: KeepDtypeOpt = None,
    target: Annotated[str | None, typer.Option("--target", help="Op info target: cpu or cuda (default cpu).")] = None,
    keep_io_types: Annotated[
        bool | None,
        typer.Option("--keep-io-types/--no-keep-io-types", help="Keep graph input/output dtypes (default on)."),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    settings = _settings(model, output, config, precision_mode, modify_mixlist, keep_dtype, target, keep_io_types)
    given = {"model": model, "output": output, "modify_mixlist": modify_mixlist, "keep_dtype": keep_dtype}
    with OutputGuard() as guard:
        opened, destination = _declare_files(guard, settings, given, config)
        result = rewrite_model_detailed(
            opened,
            settings["precision_mode"],
            modify_mixlist=settings["modify_mixlist"],
            keep_dtype=settings["keep_dtype"],
            target=settings["target"],
            keep_io_types=settings["keep_io_types"],
            float16_encoder=_float16_by_onnx_runtime,
        )
        written = save_model_atomic(result.savable, destination, guard=guard)
    summary = rewrite_summary(result, Path(settings["model"]), written)
    if json_output:
        print_json(summary)
        return
    for warning in result.warnings:
        print_warning(warning)
    _print_summary(summary)
