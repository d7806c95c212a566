"""Small real ONNX models for the engine tests, built with onnx.helper, plus helpers to run them in ORT."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from ampconfig.decide.context import DecisionContext
from ampconfig.decide.plan import Plan, build_plan
from ampconfig.opinfo.library import OpInfo, OpInfoLibrary, ReduceFlag
from ampconfig.precision_modes import parse_mode
from ampconfig.rewrite.names import name_unnamed_nodes
from ampconfig.rewrite.types import annotate_dtypes

#: Every distinct precision mode (allow_mix_precision_fp16 is allow_mix_precision under another name).
MODES = (
    "force_fp32",
    "force_fp16",
    "allow_fp32_to_fp16",
    "must_keep_origin_dtype",
    "allow_mix_precision",
    "allow_mix_precision_bf16",
    "allow_fp32_to_bf16",
)
IR_VERSION = 10  # ORT 1.31 reads IR <= 13; onnx 1.23 would stamp 14
FLOAT = TensorProto.FLOAT
FLOAT16 = TensorProto.FLOAT16


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
    opset: int = 17,
    name: str = "test",
) -> onnx.ModelProto:
    graph = oh.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def tensor(name: str, elem: int = FLOAT, shape: Sequence[int | str] | None = None) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


def one_relu(shape: Sequence[int | str] = (2,)) -> onnx.ModelProto:
    """``y = Relu(x)``, float32: the smallest model a session runs (the worker's own costs)."""
    return make_model(
        [oh.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", FLOAT, shape)], [tensor("y", FLOAT, shape)]
    )


def weight(name: str, *shape: int, seed: int = 0, scale: float = 0.1) -> onnx.TensorProto:
    rng = np.random.default_rng(seed + sum(map(ord, name)))
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def const(name: str, value: float | np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


def library(
    colours: Mapping[str, str | None], dtypes: Iterable[str] = ("float32", "float16", "bfloat16")
) -> OpInfoLibrary:
    """An op info library with the given colours (None = gray) and the same kernels for every op."""

    def entry(colour: str | None) -> OpInfo:
        kernels = dict(dtypes=list(dtypes), dtype_source="probe")
        if colour in ("white", "black"):
            return OpInfo(precision_reduce=ReduceFlag("true" if colour == "white" else "false"), **kernels)
        return OpInfo(clear=colour == "clear", **kernels)

    return OpInfoLibrary("cpu", "CPUExecutionProvider", "test", {op: entry(c) for op, c in colours.items()})


#: Colours for the painting tests, as docs/design.md §5 uses them.
DESIGN_COLOURS: dict[str, str | None] = {
    "MatMul": "white",
    "Gemm": "white",
    "Softmax": "black",
    "LayerNormalization": "black",
    "Exp": "black",
    "Add": None,
    "Sub": None,
    "Mul": None,
    "Div": None,
    "Erf": None,
    "Sqrt": None,
    "Reshape": "clear",
    "Transpose": "clear",
    "Relu": "clear",
    "Identity": "clear",
    "Concat": "clear",
}


def plan_for(model: onnx.ModelProto, mode: str, lib: OpInfoLibrary | None = None) -> tuple[ir.Model, Plan]:
    ir_model = ir.serde.deserialize_model(model)
    name_unnamed_nodes(ir_model)
    annotate_dtypes(ir_model)
    lib = lib or library(DESIGN_COLOURS)
    plan = build_plan(ir_model, DecisionContext(parse_mode(mode), lib.lists(), lib))
    return ir_model, plan


def dtypes_by_name(plan: Plan) -> dict[str, str | None]:
    return {d.name: d.dtype for d in plan.decisions()}


def resize_chain(
    mode: str, reshape: Sequence[int], scales: Sequence[float], output: Sequence[int], opset: int
) -> onnx.ModelProto:
    """x [8, 8] -> MatMul -> Reshape ``reshape`` -> Resize (``mode``, by ``scales``) -> Relu -> y ``output``."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((8, 8)) / 3).astype(np.float32), "w"),
        numpy_helper.from_array(np.array(reshape, np.int64), "shape"),
        numpy_helper.from_array(np.array(scales, np.float32), "scales"),
    ]
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        oh.make_node("Reshape", ["h", "shape"], ["h4"], name="reshape"),
        oh.make_node("Resize", ["h4", "", "scales"], ["r"], name="resize", mode=mode),
        oh.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    graph = oh.make_graph(
        nodes,
        "resize",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [8, 8])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, list(output))],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=10)


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    return session(model).run(None, dict(feeds))


def rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got64 - want64) / max(np.linalg.norm(want64), 1e-30))


def casts(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "Cast"]


def transformer_block(hidden: int = 32, seq: int = 8, seed: int = 0) -> onnx.ModelProto:
    """Pre-LN transformer block: LN -> Q/K/V MatMuls -> scaled QK^T -> Softmax -> AV -> out proj -> residual,
    then LN -> MatMul -> GELU (Erf form) -> MatMul -> residual. Single head keeps it readable."""
    h = hidden
    nodes = [
        oh.make_node("LayerNormalization", ["x", "ln1_g", "ln1_b"], ["ln1"], axis=-1, name="ln1"),
        oh.make_node("MatMul", ["ln1", "wq"], ["q"], name="q_proj"),
        oh.make_node("MatMul", ["ln1", "wk"], ["k"], name="k_proj"),
        oh.make_node("MatMul", ["ln1", "wv"], ["v"], name="v_proj"),
        oh.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="k_t"),
        oh.make_node("MatMul", ["q", "kt"], ["scores"], name="qk"),
        oh.make_node("Div", ["scores", "sqrt_d"], ["scaled"], name="scale"),
        oh.make_node("Softmax", ["scaled"], ["probs"], axis=-1, name="softmax"),
        oh.make_node("MatMul", ["probs", "v"], ["ctx"], name="av"),
        oh.make_node("MatMul", ["ctx", "wo"], ["attn"], name="o_proj"),
        oh.make_node("Add", ["attn", "x"], ["res1"], name="residual1"),
        oh.make_node("LayerNormalization", ["res1", "ln2_g", "ln2_b"], ["ln2"], axis=-1, name="ln2"),
        oh.make_node("MatMul", ["ln2", "w1"], ["h1"], name="fc1"),
        oh.make_node("Div", ["h1", "sqrt2"], ["g_div"], name="gelu_div"),
        oh.make_node("Erf", ["g_div"], ["g_erf"], name="gelu_erf"),
        oh.make_node("Add", ["g_erf", "one"], ["g_add"], name="gelu_add"),
        oh.make_node("Mul", ["h1", "g_add"], ["g_mul"], name="gelu_mul"),
        oh.make_node("Mul", ["g_mul", "half"], ["gelu"], name="gelu_half"),
        oh.make_node("MatMul", ["gelu", "w2"], ["mlp"], name="fc2"),
        oh.make_node("Add", ["mlp", "res1"], ["y"], name="residual2"),
    ]
    initializers = [
        const("ln1_g", np.ones(h)),
        const("ln1_b", np.zeros(h)),
        const("ln2_g", np.ones(h)),
        const("ln2_b", np.zeros(h)),
        weight("wq", h, h, seed=seed),
        weight("wk", h, h, seed=seed),
        weight("wv", h, h, seed=seed),
        weight("wo", h, h, seed=seed),
        weight("w1", h, 4 * h, seed=seed),
        weight("w2", 4 * h, h, seed=seed),
        const("sqrt_d", np.sqrt(h)),
        const("sqrt2", np.sqrt(2.0)),
        const("one", 1.0),
        const("half", 0.5),
    ]
    return make_model(
        nodes,
        [tensor("x", FLOAT, ["batch", seq, h])],
        [tensor("y", FLOAT, ["batch", seq, h])],
        initializers,
        name="transformer_block",
    )


def recursive_function_model() -> onnx.ModelProto:
    """x -> local::F -> y, where the model-local function F calls itself: ONNX's shape inference refuses it even
    leniently (a ValidationError: "Cycle detected in model-local function references")."""
    opsets = [oh.make_opsetid("", 17), oh.make_opsetid("local", 1)]
    function = oh.make_function("local", "F", ["a"], ["b"], [oh.make_node("F", ["a"], ["b"], domain="local")], opsets)
    graph = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["r"], name="relu"), oh.make_node("F", ["r"], ["y"], name="f", domain="local")],
        "recursive",
        [tensor("x", FLOAT, [2])],
        [tensor("y", FLOAT, [2])],
    )
    model = oh.make_model(graph, opset_imports=opsets, functions=[function])
    model.ir_version = IR_VERSION
    return model
