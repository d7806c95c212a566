"""``ampconfig ops-info``: build and inspect the built-in op info library (``ops_info/<target>.json``).

This module holds the group and what its subcommands share. ``probe`` measures which float dtypes the target's ONNX
Runtime provider runs each op in, and which natively, and ``import-table`` reads them from ONNX Runtime's published
kernel table (``ops_info_probe_cmd``); ``import-kernels`` reads them from its kernel registry and ``import-ascend``
takes the colours of an Ascend ops-info file (``ops_info_import_cmd``); ``apply-strategy`` colours a file anew and
``show`` prints entries (``ops_info_show_cmd``). :mod:`ampconfig.opinfo.build` turns the claims into the file,
coloured by the built-in strategy (:mod:`ampconfig.opinfo.colours`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from ampconfig.cli.options import output_path, receiving_bundled
from ampconfig.cli.output import stderr
from ampconfig.cli.typer_app import SubcommandGroup, app, register_command
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.targets import DEFAULT_TARGET, PROVIDERS, TARGETS

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads neither pydantic nor the op info library
    from ampconfig.files.guard import Destination, OutputGuard
    from ampconfig.opinfo.ops_info_file import OpInfoEntry, OpsInfoFile
    from ampconfig.opinfo.targets import TargetName

OpInfoOutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        metavar="FILE",
        parser=output_path("--output"),
        help="File to write (- is standard output). Default: ops_info/<target>.json of the source checkout "
        "ampconfig runs from (an installed package is never written to: give -o there).",
    ),
]
TargetOpt = Annotated[str, typer.Option("--target", "-t", metavar="cpu|cuda", help="Execution target: cpu or cuda.")]
#: The role of the written op info file, as refusals name it.
OUTPUT_ROLE = "op info file (--output)"

ops_info_app = typer.Typer(
    help=(
        "Build and inspect the op info library: per op type its list colour (white/black/gray/clear) and the "
        "float dtypes the target has kernels for.\n\n"
        "Examples:\n\n"
        "  ampconfig ops-info show MatMul Softmax --target cpu\n\n"
        "  ampconfig ops-info probe --target cpu --ops Relu,MatMul --output /tmp/cpu.json\n\n"
        "  ampconfig ops-info import-table OperatorKernels.md --target cuda\n\n"
        "  ampconfig ops-info import-kernels kernels.json --target cuda"
    ),
    no_args_is_help=True,
    cls=SubcommandGroup,
)
app.add_typer(ops_info_app, name="ops-info")


def subcommand(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        register_command(ops_info_app, name, func)
        return func

    return register


@dataclass(frozen=True)
class WrittenOpInfo:
    """What a command that writes a target's op info file was given: the target (checked) and ``--output``."""

    target: TargetName
    output: Path | None

    @property
    def provider(self) -> str:
        """The target's ONNX Runtime execution provider."""
        return PROVIDERS[self.target]

    def path(self) -> Path:
        """Where the file goes: ``--output``, else the checkout's ``ops_info/<target>.json``."""
        return self.output or default_output(self.target)

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> WrittenOpInfo:
        """The ``--target`` and ``--output`` given, the target checked (a located error where it is unknown)."""
        return cls(check_target(given["target"]), given["output"])


def writing_subcommand(
    name: str, target: Any = TargetOpt, default_target: str = DEFAULT_TARGET
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``func(written: WrittenOpInfo, *, own...)``, a subcommand that writes a target's op info file: its
    options are ``--target`` (declared ``target``, its default ``default_target``) and ``--output``, declared
    here once for every such subcommand, then its own; it receives the first two as one :class:`WrittenOpInfo`."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    shared = [
        inspect.Parameter("target", keyword, default=default_target, annotation=target),
        inspect.Parameter("output", keyword, default=None, annotation=OpInfoOutputOpt),
    ]

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        register_command(ops_info_app, name, receiving_bundled(func, shared, [], WrittenOpInfo.of))
        return func

    return register


def default_output(target: str) -> Path:
    """Where the op info commands write without -o: the checkout's ``ops_info/<target>.json``; never into an
    installed package."""
    from ampconfig.opinfo.library import ops_info_path, source_ops_info_path

    path = source_ops_info_path(target)
    if path is None:
        raise AmpconfigError(
            f"no -o given, and ampconfig runs from an installed package ({ops_info_path(target).parent}), which is "
            "never written to",
            hint="pass the file to write: -o FILE",
        )
    return path


def check_target(target: str) -> TargetName:
    if target not in TARGETS:
        raise AmpconfigError(f"unknown target {target!r}", hint="valid targets: " + ", ".join(TARGETS))
    return cast("TargetName", target)


def read_ops_info(path: Path, what: str = "op info file") -> OpsInfoFile:
    from ampconfig.documents.parsing import read_text, scan_json
    from ampconfig.opinfo.library import parse_ops_info

    text = read_text(path, what)
    scan_json(text, str(path))  # bounded: deep nesting and too many values are refused before json.loads
    return parse_ops_info(text, str(path))


def write_ops_info(document: OpsInfoFile, destination: Destination, guard: OutputGuard) -> None:
    """Through the guard: atomically, so a reader never sees half a file. The packaged file, when that is the one
    written, is read anew by the next load_ops_info (its cache is keyed on the file's identity)."""
    from ampconfig.opinfo.build import ops_info_text

    guard.write_text(destination, ops_info_text(document))


def report_written(entries: Mapping[str, OpInfoEntry], path: Path, seconds: float) -> None:
    not_probed = sum(entry.dtype_source == "not-probed" for entry in entries.values())
    stderr.print(
        f"wrote {path}: {len(entries)} ops in {seconds:.1f} s; runs in: {_count(entries, 'dtypes')}; "
        f"natively: {_count(entries, 'native_dtypes')}; not probed: {not_probed}",
        markup=False,
    )


def _count(entries: Mapping[str, OpInfoEntry], field: str) -> str:
    from ampconfig.dtypes import FLOAT_DTYPES

    def listed(entry: OpInfoEntry) -> list[str]:
        return getattr(entry, field) or []

    return ", ".join(f"{dtype} {sum(dtype in listed(e) for e in entries.values())}" for dtype in FLOAT_DTYPES)
