"""``ampconfig lists``: the effective white/black/gray/clear lists of a target, after a mixlist."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ampconfig.cli.app import command
from ampconfig.cli.output import print_json, print_warning
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.library import TARGETS, Colour, load_ops_info
from ampconfig.settings.config import check_mode_accepts_mixlist
from ampconfig.settings.mixlist import apply_mixlist, load_mixlist
from ampconfig.settings.modes import parse_mode


@command("lists")
def lists(
    precision_mode: Annotated[
        str,
        typer.Option("--precision-mode", help="Precision mode (v1 name or v2 alias).", show_default=False),
    ],
    modify_mixlist: Annotated[
        Path | None,
        typer.Option(
            "--modify-mixlist",
            help="Mixlist JSON applied to the lists (mixed modes only).",
            show_default=False,
        ),
    ] = None,
    target: Annotated[str, typer.Option("--target", help="Op info target: cpu or cuda.")] = "cpu",
    json_output: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Print the effective op lists: the target's op info merged with the mixlist.

    White ops always run in low precision, black ops stay fp32, gray ops follow their inputs and clear ops
    (pass-through) follow their neighbours. The lists only matter in the mixed precision modes.
    """
    mode = parse_mode(precision_mode)
    if target not in TARGETS:
        raise AmpconfigError(f"unknown target {target!r}", hint="targets: " + ", ".join(TARGETS))
    check_mode_accepts_mixlist(mode, modify_mixlist is not None, str(modify_mixlist) if modify_mixlist else None)
    library = load_ops_info(target)
    effective = library.lists()
    if modify_mixlist is not None:
        effective, problems = apply_mixlist(effective, load_mixlist(modify_mixlist))
        for problem in problems:
            print_warning(problem.format())
    if json_output:
        print_json(effective.as_dict())
        return
    print(f"precision mode {mode.value}, target {target} (op info: {library.source})")
    if not mode.is_mixed:
        print(f"note: {mode.value} is not a mixed mode: it applies one rule to every op and ignores these lists")
    for colour in Colour:
        members = effective.members(colour)
        print(f"{colour.value} ({len(members)}): {', '.join(members) if members else '-'}")
