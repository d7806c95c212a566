"""Hostile input: random configs, mixlists and graphs (hypothesis) and hand-made broken files, through the CLI and
the API. Whatever comes in: no traceback, the documented exit code (0 ok, 1 check failed, 2 usage/input), every
written model passes the full checker and loads in ONNX Runtime, the input file is never touched, and a failure
leaves no output file and no temporary file behind.

The hypothesis budget is fixed and derandomized so CI is deterministic and the file runs well under 90 s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from typer.testing import CliRunner, Result

from ampconfig import rewrite_model_detailed
from ampconfig.cli import app
from ampconfig.documents.mixlist_file import VALID_COMBINATIONS, Edit
from ampconfig.errors import AmpconfigError
from tests.cli.test_signals import signalled_at
from tests.files.test_guard import reading
from tests.graphs import IR_VERSION
from tests.unusual_models import PROBABILITY_MAPS

settings.register_profile(
    "hostile",
    derandomize=True,  # the same examples on every run: CI never flakes on a newly drawn case
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)


#: By hand, to search further than CI does: ``AMPCONFIG_HOSTILE_SCALE=20 pytest tests/hostile/test_hostile.py``
#: multiplies every budget and draws new random examples on each run (CI keeps the fixed, derandomized ones).
_SCALE = int(os.environ.get("AMPCONFIG_HOSTILE_SCALE", "1"))


def hostile(examples: int, *, shrink: bool = True) -> settings:
    """The shared profile with this test's example budget. ``shrink=False`` for properties whose examples are
    processes (seconds each): a failure is reported as found, not minimised for minutes."""
    phases = tuple(Phase) if shrink else (Phase.explicit, Phase.reuse, Phase.generate)
    if _SCALE > 1:
        return settings(
            settings.get_profile("hostile"), max_examples=examples * _SCALE, derandomize=False, phases=phases
        )
    return settings(settings.get_profile("hostile"), max_examples=examples, phases=phases)


MODES = (
    "allow_mix_precision",
    "force_fp16",
    "force_fp32",
    "allow_fp32_to_fp16",
    "must_keep_origin_dtype",
    "allow_mix_precision_bf16",
    "allow_fp32_to_bf16",
)
MIXED_MODES = ("allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16", "mixed_float16")
EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE = 0, 1, 2
runner = CliRunner()


# ---------------------------------------------------------------------------------------------- CLI harness
def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _undecodable_name(name: bytes) -> bool:
    """A file name's bytes that are not UTF-8 (and can be a name: no slash, no NUL)."""
    if b"/" in name or b"\0" in name or name in (b".", b".."):
        return False
    try:
        name.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def _text(result: Result) -> str:
    parts = [result.stdout]
    with contextlib.suppress(ValueError):  # older click mixes stderr into stdout and raises here
        parts.append(result.stderr)
    return "\n".join(parts)


def invoke(args: Sequence[str | Path], inputs: Sequence[Path] = (), output: Path | None = None) -> Result:
    """Run the CLI and check what must hold for any input: no traceback, no internal error, a documented exit code,
    inputs untouched, and an output file only on success (and then a valid, loadable model)."""
    before = {path: _digest(path) for path in inputs}
    folder = output.parent if output is not None else None
    result = runner.invoke(app, [str(a) for a in args])
    text = _text(result)
    assert "Traceback" not in text, text
    assert "internal error" not in text, text
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE), (result.exit_code, text)
    for path, digest in before.items():
        assert _digest(path) == digest, f"{path} was modified"
    if folder is not None:
        assert _leftovers(folder) == [], _leftovers(folder)
        if result.exit_code == EXIT_USAGE:
            assert not output.exists(), f"{output} written although the command failed: {text}"
        elif result.exit_code == EXIT_OK and args[0] == "rewrite":
            assert_valid_model(onnx.load(str(output)))
    return result


# ---------------------------------------------------------------------------------------------- model checks
def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def loads_in_ort(model: onnx.ModelProto) -> bool:
    try:
        session(model)
    except Exception:  # ORT raises its own exception types for every load failure
        return False
    return True


def assert_valid_model(model: onnx.ModelProto, load: bool = True) -> None:
    """docs/design.md §6: full checker, unique node and value names; loads in ORT CPU when asked."""
    onnx.checker.check_model(model, full_check=True)
    names = [n.name for n in model.graph.node]
    assert len(names) == len(set(names)), "duplicate node names"
    produced = [o for n in model.graph.node for o in n.output if o]
    assert len(produced) == len(set(produced)), "a value is produced twice"
    if load:
        session(model)


def save(model: onnx.ModelProto, folder: Path, name: str = "model.onnx") -> Path:
    path = folder / name
    path.write_bytes(model.SerializeToString())
    return path


def value(name: str, elem: int, shape: Sequence[int | str] | None) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


def make(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
    opset: int = 17,
) -> onnx.ModelProto:
    graph = oh.make_graph(list(nodes), "hostile", list(inputs), list(outputs), list(initializers))
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model


def small_model() -> onnx.ModelProto:
    """MatMul -> Add -> Relu -> Softmax: white, gray, clear and black ops, valid in every mode."""
    rng = np.random.default_rng(0)
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        oh.make_node("Add", ["h", "b"], ["a"], name="add"),
        oh.make_node("Relu", ["a"], ["r"], name="relu"),
        oh.make_node("Softmax", ["r"], ["y"], axis=-1, name="softmax"),
    ]
    weights = [
        numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
        numpy_helper.from_array(np.zeros(8, np.float32), "b"),
    ]
    return make(nodes, [value("x", TensorProto.FLOAT, ["n", 8])], [value("y", TensorProto.FLOAT, ["n", 8])], weights)


# ---------------------------------------------------------------------------------------------- random graphs
FLOAT_ELEMS = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}
UNARY = ("Relu", "Exp", "Sqrt", "Tanh", "Erf", "Identity")
BINARY = ("Add", "Mul", "Sub", "Div")


@dataclass(frozen=True)
class Tensor:
    name: str
    elem: int
    shape: tuple[int, ...]


@dataclass
class GraphDraft:
    """A graph under construction; every tensor's dtype and concrete shape is tracked so ops get valid operands."""

    opset: int
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    inputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    feeds: dict[str, np.ndarray] = field(default_factory=dict)
    extra_outputs: list[onnx.ValueInfoProto] = field(default_factory=list)  # outputs that are not tensors
    count: int = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def constant(self, array: np.ndarray) -> str:
        name = self.fresh("c")
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def add(self, op: str, inputs: list[str], elem: int, shape: tuple[int, ...], **attrs: Any) -> Tensor:
        out = Tensor(self.fresh(op.lower()), elem, shape)
        self.nodes.append(oh.make_node(op, inputs, [out.name], name=self.fresh(f"n_{op}"), **attrs))
        self.tensors.append(out)
        return out


OpBuilder = Callable[[GraphDraft, st.DrawFn, Tensor], Tensor | None]


def _unary(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor:
    return draft.add(draw(st.sampled_from(UNARY)), [x.name], x.elem, x.shape)


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def _binary(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor:
    partners = [t for t in draft.tensors if t.elem == x.elem and _broadcasts_to(t.shape, x.shape)]
    use_tensor = partners and draw(st.booleans())
    if use_tensor:
        other = draw(st.sampled_from(partners)).name
    else:
        shape = draw(st.sampled_from([(), x.shape[-1:], x.shape]))
        other = draft.constant(
            (np.abs(np.random.default_rng(draft.count).standard_normal(shape)) + 0.5).astype(FLOAT_ELEMS[x.elem])
        )
    operands = [x.name, other] if draw(st.booleans()) or not use_tensor else [other, x.name]
    return draft.add(draw(st.sampled_from(BINARY)), operands, x.elem, x.shape)


def _matmul(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor | None:
    if not x.shape:
        return None
    k, m = x.shape[-1], draw(st.sampled_from([x.shape[-1], 3]))
    weight = draft.constant((np.random.default_rng(k).standard_normal((k, m)) * 0.3).astype(FLOAT_ELEMS[x.elem]))
    return draft.add("MatMul", [x.name, weight], x.elem, (*x.shape[:-1], m))


def _reduce(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor | None:
    if not x.shape:
        return None
    op = draw(st.sampled_from(["ReduceSum", "ReduceMean"]))
    keepdims = draw(st.sampled_from([0, 1]))
    shape = (*x.shape[:-1], 1) if keepdims else x.shape[:-1]
    # axes became an input in opset 13 (ReduceSum) and 18 (ReduceMean).
    if draft.opset >= (13 if op == "ReduceSum" else 18):
        return draft.add(op, [x.name, draft.constant(np.array([-1], np.int64))], x.elem, shape, keepdims=keepdims)
    return draft.add(op, [x.name], x.elem, shape, axes=[-1], keepdims=keepdims)


def _reshape(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor | None:
    if not x.shape:
        return None
    size, last = int(np.prod(x.shape)), x.shape[-1]
    shape = draw(st.sampled_from([(size,), (size // last, last)]))
    return draft.add("Reshape", [x.name, draft.constant(np.array(shape, np.int64))], x.elem, shape)


def _transpose(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor:
    if not x.shape:  # a scalar: no perm (onnx.helper cannot type an empty list attribute)
        return draft.add("Transpose", [x.name], x.elem, x.shape)
    return draft.add("Transpose", [x.name], x.elem, x.shape[::-1], perm=list(range(len(x.shape)))[::-1])


def _concat(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor | None:
    if not x.shape:
        return None
    other = draw(st.sampled_from([t for t in draft.tensors if t.elem == x.elem and t.shape == x.shape]))
    return draft.add("Concat", [x.name, other.name], x.elem, (2 * x.shape[0], *x.shape[1:]), axis=0)


def _unsqueeze(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor:
    return draft.add("Unsqueeze", [x.name, draft.constant(np.array([0], np.int64))], x.elem, (1, *x.shape))


def _softmax(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor | None:
    return draft.add("Softmax", [x.name], x.elem, x.shape, axis=-1) if x.shape else None


def _layer_norm(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor | None:
    if not x.shape or draft.opset < 17:
        return None
    dtype = FLOAT_ELEMS[x.elem]
    gamma, beta = draft.constant(np.ones(x.shape[-1], dtype)), draft.constant(np.zeros(x.shape[-1], dtype))
    return draft.add("LayerNormalization", [x.name, gamma, beta], x.elem, x.shape, axis=-1)


def _cast(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor:
    to = draw(st.sampled_from(list(FLOAT_ELEMS)))
    return draft.add("Cast", [x.name], to, x.shape, to=to)


def _branch(name: str, op: str, x: Tensor) -> onnx.GraphProto:
    """A branch with no inputs that reads x from the outer scope."""
    out = f"{name}_out"
    return oh.make_graph(
        [oh.make_node(op, [x.name], [out], name=f"{name}_node")], name, [], [value(out, x.elem, x.shape)]
    )


def _if(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor:
    if "cond" not in draft.feeds:
        draft.inputs.append(value("cond", TensorProto.BOOL, []))
        draft.feeds["cond"] = np.array(draw(st.booleans()))
    then_op, else_op = draw(st.sampled_from(UNARY)), draw(st.sampled_from(UNARY))
    tag = draft.fresh("if")
    return draft.add(
        "If",
        ["cond"],
        x.elem,
        x.shape,
        then_branch=_branch(f"{tag}_then", then_op, x),
        else_branch=_branch(f"{tag}_else", else_op, x),
    )


def _sparse_constant(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor | None:
    """x + a Constant whose value is stored sparse (onnx-ir cannot hold it: ampconfig carries it through)."""
    if not x.shape:
        return None
    size = int(np.prod(x.shape))
    positions = sorted(set(draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=3))))
    values = np.linspace(-1, 1, len(positions)).astype(FLOAT_ELEMS[x.elem])
    sparse = oh.make_sparse_tensor(
        numpy_helper.from_array(values, draft.fresh("sparse_values")),
        numpy_helper.from_array(np.array(positions, np.int64), draft.fresh("sparse_indices")),
        list(x.shape),
    )
    offset = draft.fresh("sparse")
    draft.nodes.append(oh.make_node("Constant", [], [offset], name=draft.fresh("n_sparse"), sparse_value=sparse))
    return draft.add("Add", [x.name, offset], x.elem, x.shape)


def _zipmap(draft: GraphDraft, draw: st.DrawFn, x: Tensor) -> Tensor | None:
    """A float32 [rows, classes] tensor into ZipMap: a graph output that is a sequence of maps, as scikit-learn
    classifier exports end."""
    if len(x.shape) != 2 or x.elem != TensorProto.FLOAT:
        return None
    maps = draft.fresh("zipmap")
    draft.nodes.append(
        oh.make_node(
            "ZipMap",
            [x.name],
            [maps],
            domain="ai.onnx.ml",
            name=draft.fresh("n_zipmap"),
            classlabels_int64s=list(range(x.shape[1])),
        )
    )
    draft.extra_outputs.append(oh.make_value_info(maps, PROBABILITY_MAPS))
    return None


OP_BUILDERS: tuple[OpBuilder, ...] = (
    _unary,
    _binary,
    _binary,
    _matmul,
    _reduce,
    _reshape,
    _transpose,
    _concat,
    _unsqueeze,
    _softmax,
    _layer_norm,
    _cast,
    _if,
    _sparse_constant,
    _zipmap,
)


@dataclass(frozen=True)
class RandomGraph:
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]


@st.composite
def random_graphs(draw: st.DrawFn) -> RandomGraph:
    """A random DAG: 1-3 inputs (float32 mostly, some float16), 1-10 ops with valid operands (sparse constants and
    ZipMap's sequence of maps among them), 1-3 outputs."""
    draft = GraphDraft(opset=draw(st.sampled_from([13, 17, 18])))
    for index in range(draw(st.integers(1, 3))):
        elem = draw(st.sampled_from([TensorProto.FLOAT] * 4 + [TensorProto.FLOAT16]))
        shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
        declared: list[int | str] = list(shape)
        if draw(st.booleans()):
            declared[0] = f"batch{index}"  # a symbolic dimension, one name per size so feeds stay consistent
        name = f"in{index}"
        draft.inputs.append(value(name, elem, declared))
        draft.feeds[name] = np.random.default_rng(index).standard_normal(shape).astype(FLOAT_ELEMS[elem])
        draft.tensors.append(Tensor(name, elem, shape))
    for _ in range(draw(st.integers(1, 10))):
        x = draw(st.sampled_from(draft.tensors))
        draw(st.sampled_from(OP_BUILDERS))(draft, draw, x)
    produced = [t for t in draft.tensors if not t.name.startswith("in")]
    if not produced:  # every drawn op was skipped: fall back to one Identity
        produced = [draft.add("Identity", [draft.tensors[0].name], draft.tensors[0].elem, draft.tensors[0].shape)]
    extra = draw(st.lists(st.sampled_from(produced), max_size=2, unique=True))
    outputs = list(dict.fromkeys([produced[-1], *extra]))
    model = make(
        draft.nodes,
        draft.inputs,
        [*(value(t.name, t.elem, t.shape) for t in outputs), *draft.extra_outputs],
        draft.initializers,
        opset=draft.opset,
    )
    if draft.extra_outputs:
        model.opset_import.append(oh.make_opsetid("ai.onnx.ml", 3))
    onnx.checker.check_model(model, full_check=True)  # a generator bug, never an ampconfig finding
    return RandomGraph(model, dict(draft.feeds))


# ---------------------------------------------------------------------------------------------- random mixlists
KNOWN_OPS = ("MatMul", "Add", "Relu", "Softmax", "Erf", "Conv", "LayerNormalization", "Mul", "Exp")
UNKNOWN_OPS = ("MyCustomOp", "com.microsoft::FusedMatMul", "ai.onnx::Relu", "matmul")
BAD_KEYS: tuple[Any, ...] = ("", "Mat Mul", "::Relu", "1Bad", 42, None, ["MatMul"])
ALL_EDITS = tuple(Edit)


@dataclass(frozen=True)
class MixlistCase:
    data: Any
    valid: bool  # ampconfig must accept it (warnings allowed)


def _mixlist_from_edits(edits: dict[str, frozenset[Edit]]) -> dict[str, dict[str, list[Any]]]:
    data: dict[str, dict[str, list[Any]]] = {}
    for op, combination in edits.items():
        for edit in sorted(combination, key=ALL_EDITS.index):
            data.setdefault(edit.list_key, {}).setdefault(edit.action, []).append(op)
    return data


@st.composite
def mixlists(draw: st.DrawFn) -> MixlistCase:
    """Per op a set of edits (valid or not); sometimes a malformed key or structure. Validity is known by
    construction, from docs/design.md §4's eleven combinations."""
    ops = draw(st.lists(st.sampled_from(KNOWN_OPS + UNKNOWN_OPS), min_size=0, max_size=5, unique=True))
    edits = {op: frozenset(draw(st.sets(st.sampled_from(ALL_EDITS), min_size=1, max_size=3))) for op in ops}
    valid = all(combination in VALID_COMBINATIONS for combination in edits.values())
    data: Any = _mixlist_from_edits(edits)
    damage = draw(st.sampled_from(["none"] * 6 + ["bad_key", "unknown_list", "not_a_list", "top_list", "extra"]))
    if damage == "bad_key":
        data.setdefault("black-list", {}).setdefault("to-add", []).append(draw(st.sampled_from(BAD_KEYS)))
    elif damage == "unknown_list":
        data["grey-list"] = {"to-add": ["Add"]}
    elif damage == "not_a_list":
        data["white-list"] = {"to-add": "MatMul"}
    elif damage == "top_list":
        data = [data]
    elif damage == "extra":
        data.setdefault("gray-list", {})["to-move"] = ["Add"]
    return MixlistCase(data, valid and damage == "none")


# ---------------------------------------------------------------------------------------------- random configs
MODE_VALUES: tuple[Any, ...] = (*MODES, "fp16", "mixed_float16", "allow_mix_precison", "FORCE_FP16", "", 3, None)


def _toml_value(item: Any) -> str:
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, (int, float)):
        return repr(item)
    if isinstance(item, str):
        return json.dumps(item)
    if isinstance(item, list):
        return "[" + ", ".join(_toml_value(v) for v in item) + "]"
    raise TypeError(item)


def to_toml(data: dict[str, Any], prefix: str = "") -> str:
    """A small TOML writer (scalars, lists, nested tables, None left out) so the stdlib is enough."""
    lines, tables = [], []
    for key, item in data.items():
        if item is None:
            continue
        if isinstance(item, dict):
            tables.append((key, item))
        elif isinstance(item, list) and any(isinstance(v, dict) for v in item):
            continue  # arrays of tables are not needed here
        else:
            lines.append(f"{json.dumps(key)} = {_toml_value(item)}")
    for key, table in tables:
        name = f"{prefix}.{json.dumps(key)}" if prefix else json.dumps(key)
        lines.append(f"\n[{name}]")
        lines.append(to_toml(table, name))
    return "\n".join(lines)


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if draw(st.booleans()):
        data[draw(st.sampled_from(["precision_mode", "precision_mode_v2"]))] = draw(st.sampled_from(MODE_VALUES))
    if draw(st.booleans()):
        data["target"] = draw(st.sampled_from(["cpu", "cuda", "gpu", "CPU", 1]))
    data["model"] = draw(st.sampled_from(["model.onnx", "missing.onnx", "", None]))
    data["output"] = draw(st.sampled_from(["out.onnx", "no_such_folder/out.onnx", "model.onnx", None]))
    if draw(st.integers(0, 3)) == 0:
        data["modify_mixlist"] = (
            draw(st.sampled_from(["mixlist.json", "missing.json", 5])) if draw(st.booleans()) else draw(mixlists()).data
        )
    if draw(st.integers(0, 3)) == 0:
        data["keep_dtype"] = draw(st.sampled_from([["mm"], ["OpType::Softmax"], ["OpType::"], "keep.cfg", [], 7]))
    if draw(st.integers(0, 3)) == 0:
        data["keep_io_types"] = draw(st.sampled_from([True, False, "yes"]))
    if draw(st.integers(0, 3)) == 0:
        data["tolerance"] = {"rel_l2": draw(st.sampled_from([0.01, -1.0, "x", 0]))}
    if draw(st.integers(0, 4)) == 0:
        data[draw(st.sampled_from(["precison_mode", "run", "extra"]))] = draw(st.sampled_from([{"warmup": -1}, "x"]))
    return data


def render_config(data: dict[str, Any], fmt: str) -> str:
    clean = {k: v for k, v in data.items() if v is not None}
    if fmt == "json":
        return json.dumps(clean, indent=2)
    if fmt == "toml":
        return to_toml(clean)
    return yaml.safe_dump(clean, sort_keys=False)


def damage_text(text: str, how: str, at: float) -> str:
    cut = int(len(text) * at)
    if how == "truncate":
        return text[:cut]
    if how == "garbage":
        return text[:cut] + "\x00{[: \u00e9\ufffd" + text[cut:]
    if how == "comment":
        return "// a comment\n" + text
    return text


# ---------------------------------------------------------------------------------------------- API properties
def _refusal_is_clear(exc: AmpconfigError, mode: str) -> bool:
    """The only refusals a valid random graph may get: must_keep_origin_dtype naming a node the target cannot
    run in its dtype. 'would be invalid' is ampconfig admitting a bug."""
    return mode == "must_keep_origin_dtype" and "would be invalid" not in exc.message


@hostile(60)
@given(graph=random_graphs(), mode=st.sampled_from(MODES), target=st.sampled_from(["cpu", "cpu", "cuda"]))
def test_api_random_graphs(graph: RandomGraph, mode: str, target: str) -> None:
    original = graph.model.SerializeToString()
    try:
        result = rewrite_model_detailed(graph.model, mode, target=target)
    except AmpconfigError as exc:
        assert _refusal_is_clear(exc, mode), exc.message
        return
    assert graph.model.SerializeToString() == original, "the input ModelProto was modified"
    model = result.model
    original_loads = loads_in_ort(graph.model)
    # Written for cuda, a model may hold ops the CPU provider lacks: the checker is what must hold there.
    assert_valid_model(model, load=target == "cpu" and original_loads)
    assert [(v.name, v.type) for v in model.graph.input] == [(v.name, v.type) for v in graph.model.graph.input]
    assert [v.name for v in model.graph.output] == [v.name for v in graph.model.graph.output]
    if target == "cpu" and original_loads:
        got = session(model).run(None, graph.feeds)
        assert [np.asarray(g).dtype for g in got] == [
            np.asarray(w).dtype for w in session(graph.model).run(None, graph.feeds)
        ]


@hostile(40)
@given(graph=random_graphs(), mode=st.sampled_from(MODES))
def test_api_rewrite_is_idempotent(graph: RandomGraph, mode: str) -> None:
    """docs/design.md §6: rewriting an already rewritten model changes nothing."""
    try:
        once = rewrite_model_detailed(graph.model, mode, target="cpu").model
    except AmpconfigError as exc:
        assert _refusal_is_clear(exc, mode), exc.message
        return
    twice = rewrite_model_detailed(once, mode, target="cpu").model
    assert [(n.op_type, list(n.input), list(n.output)) for n in twice.graph.node] == [
        (n.op_type, list(n.input), list(n.output)) for n in once.graph.node
    ]


def _no_op_casts(model: onnx.ModelProto) -> set[str]:
    """Main-graph Casts whose input already has their output's element type."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*inferred.input, *inferred.output, *inferred.value_info)}
    types |= {tensor.name: tensor.data_type for tensor in inferred.initializer}
    casts = [node for node in inferred.node if node.op_type == "Cast"]
    return {node.name for node in casts if types.get(node.input[0], -1) == types.get(node.output[0], -2)}


@hostile(25)
@given(graph=random_graphs(), first=st.sampled_from(MODES), second=st.sampled_from(MODES))
def test_api_rewrite_of_a_rewrite(graph: RandomGraph, first: str, second: str) -> None:
    """A model rewritten in one mode, then in another: valid, without a Cast either rewrite made a no-op (a
    float16 -> float16 Cast of the first rewrite), and a third rewrite in the second mode changes nothing."""
    try:
        once = rewrite_model_detailed(graph.model, first, target="cpu").model
        twice = rewrite_model_detailed(once, second, target="cpu").model
    except AmpconfigError as exc:
        assert _refusal_is_clear(exc, "must_keep_origin_dtype"), exc.message
        return
    assert_valid_model(twice, load=loads_in_ort(graph.model))
    own = _no_op_casts(graph.model)
    assert _no_op_casts(once) <= own and _no_op_casts(twice) <= own
    thrice = rewrite_model_detailed(twice, second, target="cpu").model
    assert [(n.op_type, list(n.input), list(n.output)) for n in thrice.graph.node] == [
        (n.op_type, list(n.input), list(n.output)) for n in twice.graph.node
    ]


# ---------------------------------------------------------------------------------------------- CLI properties
@hostile(25)
@given(graph=random_graphs(), mode=st.sampled_from((*MODES, "fp16", "origin", "not_a_mode")), io=st.booleans())
def test_cli_rewrite_random_graphs(
    tmp_path_factory: pytest.TempPathFactory, graph: RandomGraph, mode: str, io: bool
) -> None:
    folder = tmp_path_factory.mktemp("cli")
    model_path, out = save(graph.model, folder), folder / "out.onnx"
    args = ["rewrite", model_path, "-o", out, "--precision-mode", mode, "--target", "cpu", "--json"]
    result = invoke([*args, "--keep-io-types" if io else "--no-keep-io-types"], [model_path], out)
    if mode == "not_a_mode":
        assert result.exit_code == EXIT_USAGE
    elif result.exit_code == EXIT_OK:
        summary = json.loads(result.stdout)
        assert summary["output"] == str(out)
    else:
        assert result.exit_code == EXIT_USAGE and mode in ("must_keep_origin_dtype", "origin"), _text(result)


@hostile(40)
@given(case=mixlists(), mode=st.sampled_from([*MIXED_MODES, "force_fp16"]))
def test_cli_random_mixlists(tmp_path_factory: pytest.TempPathFactory, case: MixlistCase, mode: str) -> None:
    folder = tmp_path_factory.mktemp("mixlist")
    mixlist = folder / "mixlist.json"
    mixlist.write_text(json.dumps(case.data))
    model_path, out = save(small_model(), folder), folder / "out.onnx"
    accepted = case.valid and mode != "force_fp16"
    checked = invoke(["validate", mixlist, "--kind", "mixlist"], [mixlist])
    assert checked.exit_code == (EXIT_OK if case.valid else EXIT_CHECK_FAILED), _text(checked)
    listed = invoke(["lists", "--precision-mode", mode, "--modify-mixlist", mixlist, "--json"], [mixlist])
    assert listed.exit_code == (EXIT_OK if accepted else EXIT_USAGE), _text(listed)
    rewritten = invoke(
        ["rewrite", model_path, "-o", out, "-m", mode, "--modify-mixlist", mixlist], [model_path, mixlist], out
    )
    assert rewritten.exit_code == (EXIT_OK if accepted else EXIT_USAGE), _text(rewritten)


@hostile(50)
@given(
    data=configs(),
    fmt=st.sampled_from(["yaml", "json", "toml"]),
    suffix=st.sampled_from([None, None, None, ".ini"]),
    damage=st.sampled_from(["none"] * 5 + ["truncate", "garbage", "comment"]),
    at=st.floats(0.05, 0.95),
)
def test_cli_random_configs(
    tmp_path_factory: pytest.TempPathFactory, data: dict[str, Any], fmt: str, suffix: str | None, damage: str, at: float
) -> None:
    folder = tmp_path_factory.mktemp("config")
    model_path = save(small_model(), folder)
    (folder / "mixlist.json").write_text('{"black-list": {"to-add": ["Relu"]}}')
    (folder / "keep.cfg").write_text("mm\nOpType::Softmax\n")
    config = folder / f"session{suffix or '.' + ('yml' if fmt == 'yaml' else fmt)}"
    config.write_text(damage_text(render_config(data, fmt), damage, at), encoding="utf-8")
    inputs = [model_path, config, folder / "mixlist.json", folder / "keep.cfg"]
    out = folder / "out.onnx"
    checked = invoke(["validate", config], inputs)
    rewritten = invoke(["rewrite", "--config", config], inputs, out)
    if rewritten.exit_code == EXIT_OK:  # only the one writable output path can succeed; invoke checked the model
        assert data.get("output") == "out.onnx" and out.exists()
    names_everything = data.get("model") == "model.onnx" and data.get("output") == "out.onnx"
    has_mode = data.get("precision_mode") is not None or data.get("precision_mode_v2") is not None
    if checked.exit_code == EXIT_OK and names_everything and has_mode:
        # validate found nothing wrong with a config that names a model, an output and a mode: rewrite must work.
        assert rewritten.exit_code == EXIT_OK, _text(rewritten)
    if checked.exit_code == EXIT_CHECK_FAILED:
        assert rewritten.exit_code == EXIT_USAGE, _text(checked) + _text(rewritten)


@hostile(8)
@given(graph=random_graphs(), mode=st.sampled_from(["allow_mix_precision", "force_fp16", "force_fp32"]))
def test_cli_run_random_graphs(tmp_path_factory: pytest.TempPathFactory, graph: RandomGraph, mode: str) -> None:
    folder = tmp_path_factory.mktemp("run")
    model_path = save(graph.model, folder)
    inputs = folder / "inputs.npz"
    np.savez(inputs, **graph.feeds)
    out = folder / "out.onnx"
    args = ["run", model_path, "-m", mode, "--target", "cpu", "--inputs", inputs, "-o", out]
    result = invoke([*args, "--warmup", "0", "--iterations", "1", "--json"], [model_path, inputs], out)
    if loads_in_ort(graph.model):
        assert result.exit_code in (EXIT_OK, EXIT_CHECK_FAILED), _text(result)
        assert_valid_model(onnx.load(str(out)))


# ---------------------------------------------------------------------------------------------- process properties
# Streams, signals, file names and locales belong to the process: these properties run the real command in a
# subprocess (a second or two each), so their budgets are a handful of examples.
def ampconfig_process(
    args: Sequence[str | bytes | Path], folder: Path, env: dict[str, str] | None = None, **streams: Any
) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "ampconfig", *(os.fsdecode(arg) for arg in args)]
    environment = {**os.environ, "TMPDIR": str(folder / "tmp"), **(env or {})}
    (folder / "tmp").mkdir(exist_ok=True)
    streams.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(command, cwd=folder, env=environment, timeout=600, **streams)


def ours_left_in(temporary: Path) -> list[str]:
    """ampconfig's staging and run folders left in the temporary folder (ONNX Runtime keeps a .ses file there)."""
    return sorted(p.name for p in temporary.iterdir() if p.name.startswith("ampconfig-") or p.name.endswith(".tmp"))


def assert_ends_cleanly(done: subprocess.CompletedProcess[bytes], folder: Path, before: dict[str, str | None]) -> None:
    """No traceback, a documented exit code, inputs unchanged, nothing left in the temporary or output folder."""
    errors = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in errors and "internal error" not in errors, errors
    assert done.returncode in (EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE), (done.returncode, errors)
    assert {name: _digest(folder / name) for name in before} == before
    assert ours_left_in(folder / "tmp") == [] and _leftovers(folder) == []


@hostile(4, shrink=False)
@given(graph=random_graphs(), mode=st.sampled_from(MODES), sink=st.sampled_from(["stdout", "fifo", "full", "closed"]))
@pytest.mark.skipif(not (hasattr(os, "mkfifo") and os.path.exists("/dev/full")), reason="needs FIFOs and /dev/full")
def test_cli_rewrite_random_graphs_into_streams(
    tmp_path_factory: pytest.TempPathFactory, graph: RandomGraph, mode: str, sink: str
) -> None:
    """Standard output, a FIFO, a full device, a pipe whose reader left: a written stream holds exactly one valid
    model; a stream that cannot take it is exit 2 with one error line; nothing is left behind."""
    folder = tmp_path_factory.mktemp("stream")
    save(graph.model, folder)
    before = {"model.onnx": _digest(folder / "model.onnx")}
    args = ["rewrite", "model.onnx", "-m", mode, "--target", "cpu"]
    received: list[bytes] = []
    if sink == "stdout":
        done = ampconfig_process([*args, "-o", "-"], folder, stdout=subprocess.PIPE)
        received.append(done.stdout)
    elif sink == "fifo":
        os.mkfifo(folder / "pipe")
        with reading(folder / "pipe") as received:
            done = ampconfig_process([*args, "-o", "pipe"], folder)
    elif sink == "full":
        with open("/dev/full", "wb") as full:
            done = ampconfig_process([*args, "-o", "-"], folder, stdout=full)
    else:
        reader, writer = os.pipe()
        os.close(reader)
        try:
            done = ampconfig_process([*args, "-o", "-"], folder, stdout=writer)
        finally:
            os.close(writer)
    assert_ends_cleanly(done, folder, before)
    if sink in ("full", "closed"):
        assert done.returncode == EXIT_USAGE
        assert len([line for line in done.stderr.splitlines() if line.startswith(b"error:")]) == 1
    elif done.returncode == EXIT_OK:
        assert_valid_model(onnx.load_from_string(b"".join(received)))
    else:
        assert b"".join(received) == b""


@hostile(3, shrink=False)
@given(
    graph=random_graphs(),
    signum=st.sampled_from([signal.SIGTERM, signal.SIGHUP, signal.SIGINT]),
    moment=st.sampled_from(["staged", "committed"]),
    replaces=st.booleans(),
)
@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_cli_rewrite_random_graphs_under_signals(
    tmp_path_factory: pytest.TempPathFactory, graph: RandomGraph, signum: int, moment: str, replaces: bool
) -> None:
    """A signal during the write: the folder is exactly as before (the old output back, or no output)."""
    folder = tmp_path_factory.mktemp("signal")
    (folder / "tmp").mkdir()
    work = folder / "work"
    work.mkdir()
    save(graph.model, work)
    if replaces:
        (work / "out.onnx").write_bytes(b"the previous output")
    before = {path.name: _digest(path) for path in work.iterdir()}
    args = ["rewrite", "model.onnx", "-m", "force_fp16", "--target", "cpu", "-o", "out.onnx"]
    paused, done = signalled_at(folder, args, moment, signum)
    errors = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in errors and "internal error" not in errors, errors
    if paused:
        assert done.returncode == (130 if signum == signal.SIGINT else -signum), errors
    else:  # refused before anything was written
        assert done.returncode == EXIT_USAGE, errors
    assert {path.name: _digest(path) for path in work.iterdir()} == before  # hidden staging folders included
    assert ours_left_in(folder / "tmp") == []


@hostile(3, shrink=False)
@given(
    name=st.binary(min_size=1, max_size=6).filter(_undecodable_name),
    locale=st.sampled_from(["PYTHONIOENCODING=ascii", "LC_ALL=C", "utf-8"]),
    command=st.sampled_from(["explain", "rewrite", "run"]),
)
@pytest.mark.skipif(sys.platform in ("darwin", "win32"), reason="file names must be valid Unicode there")
def test_cli_non_utf8_names_in_any_locale(
    tmp_path_factory: pytest.TempPathFactory, name: bytes, locale: str, command: str
) -> None:
    """A model file name that is not UTF-8, in an ASCII or UTF-8 locale: the command works, its report is what the
    stream can encode, and the HTML report is valid UTF-8."""
    folder = tmp_path_factory.mktemp("names")
    model = name + b".onnx"
    onnx.save(small_model(), os.fsdecode(os.fsencode(folder) + b"/" + model))
    env = {
        "PYTHONIOENCODING=ascii": {"PYTHONIOENCODING": "ascii"},
        "LC_ALL=C": {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""},
        "utf-8": {"PYTHONIOENCODING": "utf-8"},
    }[locale]
    extra = {
        "explain": ["--html", "report.html"],
        "rewrite": ["-o", name + b".fp16.onnx"],
        "run": ["--warmup", "0", "--iterations", "1"],
    }[command]
    before = {os.fsdecode(model): _digest(folder / os.fsdecode(model))}
    done = ampconfig_process(
        [command, model, "-m", "force_fp16", "--target", "cpu", *extra], folder, env, stdout=subprocess.PIPE
    )
    assert_ends_cleanly(done, folder, before)
    assert done.returncode == EXIT_OK, done.stderr.decode("utf-8", "replace")
    if locale != "utf-8":  # ASCII, but for the name's own bytes, which go back out as they came in
        done.stdout.replace(name, b"").decode("ascii")
    if command == "explain":
        (folder / "report.html").read_bytes().decode("utf-8")


# ---------------------------------------------------------------------------------------------- explicit cases
def test_run_with_inputs_that_disagree_on_a_dim_param(tmp_path: Path) -> None:
    """One dim_param bound to two sizes loads in ORT but fails at run time: a clear input error, not a crash."""
    # ORT CPU has no fp16 Tanh: it inserts Casts whose buffers it shares by the dim_param, and then fails.
    nodes = [oh.make_node("Tanh", ["a"], ["c"], name="t1"), oh.make_node("Tanh", ["b"], ["y"], name="t2")]
    model = make(
        nodes,
        [value("a", TensorProto.FLOAT16, ["n"]), value("b", TensorProto.FLOAT16, ["n"])],
        [value("y", TensorProto.FLOAT16, ["n"])],
        opset=13,
    )
    model_path, inputs = save(model, tmp_path), tmp_path / "inputs.npz"
    np.savez(inputs, a=np.ones(1, np.float16), b=np.ones(2, np.float16))
    out = tmp_path / "out.onnx"
    args = ["run", model_path, "-m", "allow_mix_precision", "--target", "cpu", "--inputs", inputs, "-o", out]
    result = invoke([*args, "--warmup", "0", "--iterations", "1"], [model_path, inputs], out)
    assert result.exit_code == EXIT_USAGE, _text(result)
    assert "failed to run the fp32 model" in _text(result)


def rewrite_cli(folder: Path, model_path: Path, *extra: str) -> tuple[Result, Path]:
    out = folder / "out.onnx"
    result = invoke(["rewrite", model_path, "-o", out, "-m", "allow_mix_precision", *extra], [model_path], out)
    return result, out


@pytest.mark.parametrize("keep", [0.5, 0.1, 0.9])
def test_truncated_model(tmp_path: Path, keep: float) -> None:
    data = small_model().SerializeToString()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: int(len(data) * keep)])
    result, _ = rewrite_cli(tmp_path, path)
    assert result.exit_code == EXIT_USAGE
    assert "truncated.onnx" in _text(result)


@pytest.mark.parametrize("seed", range(6))
def test_corrupt_model_bytes(tmp_path: Path, seed: int) -> None:
    """Flipped bytes may still parse; whatever happens, the invariants of `invoke` hold."""
    data = bytearray(small_model().SerializeToString())
    rng = np.random.default_rng(seed)
    for index in rng.integers(0, len(data), 8):
        data[index] = int(rng.integers(0, 256))
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(bytes(data))
    result, _ = rewrite_cli(tmp_path, path)
    assert result.exit_code in (EXIT_OK, EXIT_USAGE)


@pytest.mark.parametrize("text", ["hello, I am not a model\n", "", '{"graph": {}}', "\x00" * 64])
def test_non_model_file_named_onnx(tmp_path: Path, text: str) -> None:
    path = tmp_path / "model.onnx"
    path.write_text(text)
    result, _ = rewrite_cli(tmp_path, path)
    assert result.exit_code == EXIT_USAGE


def test_huge_declared_dims_do_not_allocate(tmp_path: Path) -> None:
    big = 2**40
    nodes = [
        oh.make_node("Add", ["x", "x"], ["a"], name="add"),
        oh.make_node("Relu", ["a"], ["r"], name="relu"),
        oh.make_node("MatMul", ["r", "w"], ["y"], name="mm"),
    ]
    # A [2**40, 4] weight cannot exist as an initializer: the MatMul's weight is a second input of declared shape.
    model = make(
        nodes,
        [value("x", TensorProto.FLOAT, [big, big]), value("w", TensorProto.FLOAT, [big, 4])],
        [value("y", TensorProto.FLOAT, [big, 4])],
    )
    path = save(model, tmp_path)
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result, out = rewrite_cli(tmp_path, path)
    assert result.exit_code == EXIT_OK, _text(result)
    # A rewrite that allocated by the declared shape would need 2**82 bytes; allow 200 MB of ordinary growth.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kib < 200 * 1024
    dims = [d.dim_value for d in onnx.load(str(out)).graph.input[0].type.tensor_type.shape.dim]
    assert dims == [big, big]


def test_cycle_is_refused(tmp_path: Path) -> None:
    nodes = [
        oh.make_node("Add", ["x", "b"], ["a"], name="first"),
        oh.make_node("Relu", ["a"], ["b"], name="second"),
    ]
    model = make(nodes, [value("x", TensorProto.FLOAT, [4])], [value("b", TensorProto.FLOAT, [4])])
    path = save(model, tmp_path)
    result, _ = rewrite_cli(tmp_path, path)
    assert result.exit_code == EXIT_USAGE
    assert "not a valid ONNX model" in _text(result)
    with pytest.raises(AmpconfigError):
        rewrite_model_detailed(model, "allow_mix_precision")


def test_input_no_one_produces_is_refused(tmp_path: Path) -> None:
    nodes = [oh.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    model = make(nodes, [value("x", TensorProto.FLOAT, [4])], [value("y", TensorProto.FLOAT, [4])])
    result, _ = rewrite_cli(tmp_path, save(model, tmp_path))
    assert result.exit_code == EXIT_USAGE
    assert "ghost" in _text(result)


def test_duplicate_node_names_are_made_unique_or_refused(tmp_path: Path) -> None:
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="same"),
        oh.make_node("Relu", ["h"], ["r"], name="same"),
        oh.make_node("Softmax", ["r"], ["y"], name="same"),
    ]
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    model = make(nodes, [value("x", TensorProto.FLOAT, [2, 4])], [value("y", TensorProto.FLOAT, [2, 4])], [w])
    for mode in MODES:
        out = tmp_path / "out.onnx"
        model_path = save(model, tmp_path)
        # Decided for the CPU: `invoke` loads the written model in ONNX Runtime's CPU provider (the default target,
        # cuda, may lower ops to bfloat16 that the CPU provider has no kernel for).
        result = invoke(["rewrite", model_path, "-o", out, "-m", mode, "--target", "cpu"], [model_path], out)
        assert result.exit_code in (EXIT_OK, EXIT_USAGE), _text(result)
        out.unlink(missing_ok=True)


@pytest.mark.parametrize("kind", ["unknown_ops", "repeats", "valid_known"])
def test_mixlist_with_5000_entries(tmp_path: Path, kind: str) -> None:
    if kind == "unknown_ops":
        data = {"black-list": {"to-add": [f"CustomOp{i}" for i in range(5000)]}}
    elif kind == "repeats":
        data = {"white-list": {"to-add": ["MatMul"] * 5000}}
    else:
        ops = sorted(onnx.defs.get_all_schemas_with_history(), key=lambda s: s.name)
        names = list(dict.fromkeys(s.name for s in ops if s.domain == ""))
        data = {"gray-list": {"to-add": (names * 40)[:5000]}}
    mixlist = tmp_path / "big.json"
    mixlist.write_text(json.dumps(data))
    model_path = save(small_model(), tmp_path)
    # Every ONNX op type, Max, Mean, Min, Sum and Where too: ONNX's names, which TensorFlow's mean otherwise.
    names = ["--op-names", "onnx"]
    result, _ = rewrite_cli(tmp_path, model_path, "--modify-mixlist", str(mixlist), *names)
    assert result.exit_code == EXIT_OK, _text(result)[:2000]
    # Its time (the "did you mean" search once took 12-25 s) is measured in benchmarks/mixlist_size.py.
    checked = invoke(["validate", mixlist, *names], [mixlist])
    assert checked.exit_code == EXIT_OK


def test_empty_graph(tmp_path: Path) -> None:
    empty = make([], [], [])
    result, _ = rewrite_cli(tmp_path, save(empty, tmp_path))
    assert result.exit_code == EXIT_USAGE
    assert "empty graph" in _text(result)


def test_graph_without_nodes_passing_input_through(tmp_path: Path) -> None:
    model = make([], [value("x", TensorProto.FLOAT, [4])], [value("x", TensorProto.FLOAT, [4])])
    onnx.checker.check_model(model, full_check=True)
    result, out = rewrite_cli(tmp_path, save(model, tmp_path))
    assert result.exit_code == EXIT_OK, _text(result)  # nothing to rewrite is not an error
    assert [o.name for o in onnx.load(str(out)).graph.output] == ["x"]


def test_output_folder_missing_and_output_is_a_directory(tmp_path: Path) -> None:
    model_path = save(small_model(), tmp_path)
    for out in (tmp_path / "missing" / "out.onnx", tmp_path):
        result = invoke(["rewrite", model_path, "-o", out, "-m", "force_fp16"], [model_path])
        assert result.exit_code == EXIT_USAGE
    assert _leftovers(tmp_path) == []


def test_output_equal_to_input_is_refused(tmp_path: Path) -> None:
    model_path = save(small_model(), tmp_path)
    result = invoke(["rewrite", model_path, "-o", model_path, "-m", "force_fp16"], [model_path])
    assert result.exit_code == EXIT_USAGE


def test_decomposed_layer_norm_after_fp16_residual_loads_in_ort() -> None:
    """A GPT-2 style block: fp16 MatMul residual feeding a decomposed LayerNorm that stays fp32."""
    rng = np.random.default_rng(0)
    ln = [
        oh.make_node("ReduceMean", ["res"], ["mean"], axes=[-1], name="rm1"),
        oh.make_node("Sub", ["res", "mean"], ["centred"], name="sub"),
        oh.make_node("Pow", ["centred", "two"], ["sq"], name="pow"),
        oh.make_node("ReduceMean", ["sq"], ["var"], axes=[-1], name="rm2"),
        oh.make_node("Add", ["var", "eps"], ["var_eps"], name="add_eps"),
        oh.make_node("Sqrt", ["var_eps"], ["std"], name="sqrt"),
        oh.make_node("Div", ["centred", "std"], ["normed"], name="div"),
        oh.make_node("Mul", ["normed", "gamma"], ["scaled"], name="mul"),
        oh.make_node("Add", ["scaled", "beta"], ["y"], name="add_beta"),
    ]
    nodes = [
        oh.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
        oh.make_node("MatMul", ["h1", "w2"], ["h2"], name="mm2"),
        oh.make_node("Add", ["h1", "h2"], ["res"], name="residual"),  # low: both inputs come from low nodes
        *ln,
    ]
    constants = {
        "w1": rng.standard_normal((16, 16)) * 0.1,
        "w2": rng.standard_normal((16, 16)) * 0.1,
        "two": np.array(2.0),
        "eps": np.array(1e-5),
        "gamma": np.ones(16),
        "beta": np.zeros(16),
    }
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in constants.items()]
    inputs, outputs = [value("x", TensorProto.FLOAT, [2, 16])], [value("y", TensorProto.FLOAT, [2, 16])]
    # Below opset 17 the chain cannot be folded into LayerNormalization, so it stays written out (and float32).
    model = make(nodes, inputs, outputs, inits, opset=16)
    assert loads_in_ort(model)
    result = rewrite_model_detailed(model, "allow_mix_precision", target="cpu")
    onnx.checker.check_model(result.model, full_check=True)
    # ORT's LayerNormFusion would absorb a Cast(fp16->fp32) between the residual and the decomposed LayerNorm
    # and write an invalid LayerNormalization; the residual stays fp32 instead, and the model loads.
    decision = {d.name: d for d in result.decisions}["residual"]
    assert decision.dtype == "float32" and decision.rule.value == "fusion_guard" and decision.cause == "rm1"
    assert loads_in_ort(result.model)
    # From opset 17 the chain is folded into one LayerNormalization node and nothing needs guarding.
    folded = rewrite_model_detailed(make(nodes, inputs, outputs, inits), "allow_mix_precision", target="cpu")
    assert folded.stats.layer_norms_folded == 1 and loads_in_ort(folded.model)
    assert not any(d.rule.value == "fusion_guard" for d in folded.decisions)
