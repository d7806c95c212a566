"""``ampconfig schema``: print or write the JSON Schemas of the session config, mixlist and op info files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ampconfig.cli.output import print_json, say
from ampconfig.cli.typer_app import command
from ampconfig.errors import AmpconfigError


def _split_arguments(arguments: list[str], write: bool) -> tuple[str | None, Path | None]:
    """``[KIND] [DIR]``: a known kind name is KIND; anything else is DIR (only meaningful with --write)."""
    from ampconfig.settings.json_schemas import KIND_ALIASES, SCHEMA_KINDS

    kind: str | None = None
    directory: Path | None = None
    for argument in arguments:
        if argument in SCHEMA_KINDS or argument in KIND_ALIASES:
            if kind is not None:
                raise AmpconfigError(f"two schema kinds given: {kind!r} and {argument!r}")
            kind = argument
        elif write and directory is None:
            directory = Path(argument)
        elif write:
            raise AmpconfigError(f"two output folders given: {str(directory)!r} and {argument!r}")
        else:
            raise AmpconfigError(
                f"unknown schema kind {argument!r}",
                hint="kinds: " + ", ".join(SCHEMA_KINDS) + " (a folder is only accepted with --write)",
            )
    return kind, directory


@command("schema")
def schema(
    arguments: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[KIND] [DIR]",
            help="KIND: session-config (or config), mixlist, ops-info, lock (a precision lock); all when absent. "
            "DIR: with --write, an existing folder to write to (default: schemas/ of the source checkout "
            "ampconfig runs from; an installed package is never written to).",
            show_default=False,
        ),
    ] = None,
    write: Annotated[bool, typer.Option("--write", help="Write <kind>.schema.json files instead of printing.")] = False,
) -> None:
    """Print the JSON Schema (draft 2020-12) of a file kind, or write the schema files with --write.

    With --write and no DIR, the files go to schemas/ of the source checkout ampconfig runs from
    (an editable install), which is how the checked-in schemas are regenerated; run from an installed package,
    DIR is required (site-packages is never written to). DIR must exist. Existing files are replaced atomically.

    Without KIND, prints one JSON object mapping each kind to its schema. Point an editor at the schema (YAML:
    `# yaml-language-server: $schema=...`, JSON: a "$schema" key) to get completion and checks while typing.
    """
    from ampconfig.settings.json_schemas import SCHEMA_KINDS, generate_schema, write_schemas

    kind, directory = _split_arguments(arguments or [], write)
    if write:
        for path in write_schemas(directory, [kind] if kind else None):
            say(str(path))
        return
    if kind is not None:
        print_json(generate_schema(kind))
    else:
        print_json({name: generate_schema(name) for name in SCHEMA_KINDS})
