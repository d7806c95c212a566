"""``ampconfig rewrite``: decide every node's dtype and write the rewritten model (no ONNX Runtime involved)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ampconfig.api import rewrite_model_detailed
from ampconfig.cli.app import command
from ampconfig.cli.options import ConfigOpt, JsonOpt, KeepDtypeOpt, MixlistOpt
from ampconfig.cli.output import print_json, print_warning, stdout
from ampconfig.decide.decisions import RewriteResult
from ampconfig.errors import AmpconfigError
from ampconfig.files.models import save_model_atomic
from ampconfig.files.paths import resolve_path

_HELP = """Rewrite MODEL for a precision mode and write the result to --output. Nothing is run: use
[bold]ampconfig run[/bold] to prove the result against fp32.

Flags override the session config (--config). The written model passes onnx.checker.check_model(full_check=True);
when it could not, nothing is written and the exit code is 2. The input model is never overwritten.

Models with external data (any model over 2 GB) are read lazily, one weight at a time; the output's weights are
written to OUTPUT.data next to --output.

[bold]Examples[/bold]

  ampconfig rewrite model.onnx -o model.mixed.onnx --precision-mode allow_mix_precision

  ampconfig rewrite model.onnx -o model.fp16.onnx --precision-mode force_fp16 --target cuda

  ampconfig rewrite model.onnx -o out.onnx --precision-mode allow_mix_precision \\
      --modify-mixlist mixlist.json --keep-dtype keep_dtype.cfg

  ampconfig rewrite --config session.yaml --json
"""


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
    if resolve_path(settings["output"]) == resolve_path(settings["model"]):  # a symbolic link loop resolves too
        raise AmpconfigError(
            "refusing to overwrite the input model", file=str(settings["output"]), hint="choose another -o path"
        )
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
    result = rewrite_model_detailed(
        settings["model"],
        settings["precision_mode"],
        modify_mixlist=settings["modify_mixlist"],
        keep_dtype=settings["keep_dtype"],
        target=settings["target"],
        keep_io_types=settings["keep_io_types"],
    )
    written = save_model_atomic(
        result.savable, settings["output"], input_path=settings["model"], input_files=result.input_files
    )
    summary = rewrite_summary(result, Path(settings["model"]), written)
    if json_output:
        print_json(summary)
        return
    for warning in result.warnings:
        print_warning(warning)
    _print_summary(summary)
