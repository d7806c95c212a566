"""``ampconfig rewrite``: decide every node's dtype and write the rewritten model, once ONNX Runtime's worker has
loaded it on its target's provider (the load check, :func:`ampconfig.engine.load_check.load_checked`; an input the
ONNX checker rejects is also run: :mod:`ampconfig.runner.acceptance`; onnxruntime is loaded in this process only to
convert large weights, :mod:`ampconfig.rewrite.float_cast`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampconfig.cli.options import SharedOptions
from ampconfig.cli.output import print_result, print_warning, stderr, stdout
from ampconfig.cli.typer_app import command
from ampconfig.cli.workbench import Workbench, workbench
from ampconfig.errors import AmpconfigError
from ampconfig.files.guard import shown_path
from ampconfig.report.tables import print_table

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads none of the rewrite machinery
    from ampconfig.files.guard import Destination
    from ampconfig.model_io.models import OpenedModel
    from ampconfig.rewrite.results import RewriteResult

_HELP = """Rewrite MODEL for a precision mode and write the result to --output. Nothing is run on data: use
[bold]ampconfig run[/bold] to prove the result against fp32.

Flags override the session config (--config), and settings resolve as for every command: the precision mode
defaults to allow_mix_precision, the decision target (--target: whose op info decides) to cuda. Deciding needs
no device: a machine without a GPU rewrites for cuda. Stale or contradictory value_info of the input (placeholder
shapes, wrong element types) is repaired in the copy that is rewritten, with a warning naming each value. The
written model has no onnx.checker.check_model(full_check=True) complaint that the input did not have: a
checker-clean input gives a checker-clean output. An input the checker still rejects is rewritten only when ONNX
Runtime loads it, and written only after the output loaded and ran there. Otherwise nothing is written and the
exit code is 2.

Before it is written, the model is loaded once in ONNX Runtime on its target's provider at the default
optimisation level (the load check): a node whose low-precision form makes ONNX Runtime crash keeps its dtype
(rule runtime_refuses, a warning naming it); a crash no node explains is exit 2, nothing written. A target whose
provider cannot be used here (cuda without a GPU) is not loaded, said in a note. --no-load-check skips it.

No input is ever overwritten: an --output that is the same file as the model, its external data, the mixlist,
the keep_dtype file or the config (however the path is spelled: symlinks, .., hard links) is refused with exit 2
before any work. An existing --output is replaced atomically; -o - (or /dev/stdout) writes the model to standard
output, the summary then going to stderr; a FIFO or character device such as /dev/null gets the model as a stream
(a model with external data cannot be streamed); a directory is refused.

Models with external data (any model over 2 GB) are read lazily, one weight at a time; the output's weights are
written to OUTPUT.data next to --output.

Each node of the written model carries its decision in its metadata_props (ampconfig.rule, ampconfig.cause,
ampconfig.precision_mode), which Netron shows beside the node; the rule is the one explain gives.
--no-decision-metadata (config decision_metadata: false) leaves them out. A model below IR version 10 has no
node metadata: it gets none, and a note says so.

[bold]Examples[/bold]

  ampconfig rewrite model.onnx -o model.mixed.onnx --precision-mode allow_mix_precision

  ampconfig rewrite model.onnx -o model.fp16.onnx --precision-mode force_fp16 --target cuda

  ampconfig rewrite model.onnx -o out.onnx --precision-mode allow_mix_precision \\
      --modify-mixlist mixlist.json --keep-dtype keep_dtype.cfg

  ampconfig rewrite --config session.yaml --json
"""


def _declare_files(bench: Workbench) -> tuple[OpenedModel, Destination]:
    """The model this rewrite reads and the output it writes, checked before any work: the output may be none of the
    inputs (model, its external data, mixlist, keep_dtype, config), nor may its external data file."""
    from ampconfig.model_io.models import open_model
    from ampconfig.settings.declared_files import declare_model, declare_model_output, settings_role
    from ampconfig.settings.resolve import require_model

    settings = bench.settings
    source = str(settings.config) if settings.config is not None else None
    if settings.example is not None:
        raise AmpconfigError("no model given", file=source, hint="pass MODEL or set `model` in the config")
    if settings.output is None:
        raise AmpconfigError("no output path given", file=source, hint="pass -o OUT.onnx or set `output`")
    require_model(settings)
    output_role = settings_role(settings, "output model", "--output", "output")
    bench.guard.output(output_role, settings.output)  # refused before the model is even read
    model = open_model(settings.model_path, map_weights=True)
    declare_model(bench.guard, model)
    return model, declare_model_output(bench.guard, settings.output, output_role, model)


def rewrite_summary(result: RewriteResult, model: Path, output: Path) -> dict[str, Any]:
    from collections import Counter

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
    from rich.table import Table

    wrote = shown_path(summary["output"])
    stdout.print(f"wrote {wrote}  ({summary['precision_mode']}, target {summary['target']})", markup=False)
    table = Table(title=None, show_header=True)
    table.add_column("what")
    table.add_column("count", justify="right")
    for dtype, count in summary["nodes_by_dtype"].items():
        table.add_row(f"nodes computing in {dtype}", str(count))
    table.add_row("nodes whose dtype changed", str(summary["nodes_changed"]))
    for key, value in summary["stats"].items():
        if value and not isinstance(value, list):  # the clamped tensors are listed as warnings
            table.add_row(key.replace("_", " "), str(value))
    print_table(stdout, table)


@command("rewrite", help=_HELP)
def rewrite(options: SharedOptions) -> None:
    from dataclasses import replace

    from ampconfig.decide.measured_facts import MeasuredFacts
    from ampconfig.engine.in_place import rewrite_with_options
    from ampconfig.engine.load_check import load_checked
    from ampconfig.model_io.models import save_model_atomic
    from ampconfig.prove.calibration import decision_values, not_checked, prepared_samples

    with workbench(options, opens_model=False) as bench:
        settings = bench.settings
        opened_model, destination = _declare_files(bench)
        values = decision_values(
            settings,
            opened_model.proto,
            lambda: prepared_samples(settings, command="rewrite", guard=bench.guard),
            progress=bench.progress,
        )

        choices = replace(settings.rewrite_options, with_cost=False)  # the summary shows no cost

        def rewrite_keeping(kept: Mapping[str, str]) -> RewriteResult:
            return rewrite_with_options(opened_model, choices, MeasuredFacts(values.ranges, runtime_refused=kept))

        result = rewrite_keeping({})
        if options.load_check:  # before it is written: a crash the net cannot help writes nothing
            result = load_checked(result, rewrite_keeping, file=str(settings.model_path))
        result.warnings.extend([*values.warnings, *not_checked(result)])
        written = save_model_atomic(result.savable, destination, guard=bench.guard)
    summary = rewrite_summary(result, settings.model_path, written)
    summary["notes"] = [*settings.notes, *result.notes]
    if options.json_output:
        print_result(summary)
        return
    for line in summary["notes"]:
        stderr.print("note: " + line, markup=False)
    for warning in result.warnings:
        print_warning(warning)
    _print_summary(summary)
