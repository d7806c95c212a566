"""``ampconfig lists``: the effective white/black/gray/clear lists of a target, after a mixlist."""

from __future__ import annotations

from ampconfig.cli.options import SharedOptions
from ampconfig.cli.output import print_result, print_warning, say, stderr
from ampconfig.cli.typer_app import command


@command("lists")
def lists(options: SharedOptions) -> None:
    """Print the effective op lists: the target's op info merged with the mixlist.

    White ops always run in low precision, black ops stay fp32, gray ops follow their inputs and clear ops
    (pass-through) follow their neighbours. The lists only matter in the mixed precision modes.

    A mixlist may name ops the TensorFlow or Ascend way (Conv2D, MatMulV2, BiasAdd) or be TensorFlow's list
    variables (TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD=...); each name read as its ONNX op is printed
    as a note (--op-names decides names that mean different ops in them: Max, Mean, Sum, Min, Where).

    Settings resolve as for every command (flags over --config over defaults): the target defaults to cuda, and
    needs no GPU; nothing is run and no ONNX Runtime is loaded.
    """

    from ampconfig.engine.read_settings import effective_lists
    from ampconfig.opinfo.library import Colour, load_ops_info

    settings = options.settings(opens_model=False)
    library = load_ops_info(settings.target)
    effective, warnings, notes = effective_lists(library, settings.read_mixlist(), settings.op_names)
    for note in notes:  # each TensorFlow/Ascend name read as its ONNX op, where the mixlist says it
        stderr.print(f"note: {note}", markup=False)
    for warning in warnings:
        print_warning(warning)
    if options.json_output:
        print_result(effective.as_dict())
        return
    mode = settings.precision_mode
    say(f"precision mode {mode.value}, target {settings.target} (op info: {library.source})")
    if not mode.is_mixed:
        say(f"note: {mode.value} is not a mixed mode: it applies one rule to every op and ignores these lists")
    for colour in Colour:
        members = effective.members(colour)
        say(f"{colour.value} ({len(members)}): {', '.join(members) if members else '-'}")
