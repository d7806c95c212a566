"""The pure pieces behind compare / range analysis / tune, and expose_values on real models."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from ampconfig.diagnose.graph_values import GraphNode, float_constants, graph_nodes
from ampconfig.diagnose.locate import locate
from ampconfig.diagnose.ranges import overflow_nodes, range_findings
from ampconfig.diagnose.tune.answer import keep_dtype_lines, mixlist_data
from ampconfig.documents.mixlist_file import Mixlist, apply_mixlist, parse_mixlist
from ampconfig.instrument.expose import EXPOSED_FLOAT32_SUFFIX, expose_values
from ampconfig.opinfo.library import load_ops_info
from ampconfig.runner.intermediates import run_with_intermediates

CHAIN = [
    GraphNode("a", "MatMul", ("x", "w"), ("va",)),
    GraphNode("b", "Add", ("va", "c"), ("vb",)),
    GraphNode("c", "Mul", ("vb",), ("vc",)),
]


def test_locate_ranks_by_added_error_and_finds_the_jump() -> None:
    ref = {name: np.linspace(1, 2, 64).astype(np.float32) for name in ("x", "va", "vb", "vc")}
    cand = dict(ref)
    cand["va"] = ref["va"] * (1 + 1e-4)  # tiny rounding: below the float16 floor
    cand["vb"] = ref["vb"] * 1.05  # the jump: 5% error from an input at 1e-4
    cand["vc"] = ref["vc"] * 1.06  # carries the error on, adds little
    result = locate(CHAIN, ref, cand, threshold=1e-2)
    assert result.first_bad is not None and result.first_bad.name == "b"
    assert result.ranked()[0].name == "b"
    by_name = result.by_name()
    assert math.isclose(by_name["a"].gain, 1e-4 / 2.0**-11, rel_tol=1e-3)  # exact inputs: the floor decides
    assert by_name["c"].gain < 2 and by_name["c"].input_error > 1e-2


def test_locate_reports_overflow_and_nonfinite_gain() -> None:
    ref = {"x": np.ones(4, np.float32), "va": np.full(4, 7e4, np.float32), "vb": np.ones(4, np.float32)}
    cand = {"x": ref["x"], "va": np.array([np.inf, 7e4, 7e4, 7e4]), "vb": np.array([np.nan, 1, 1, 1])}
    result = locate(CHAIN[:2], ref, cand)
    a, b = result.nodes
    assert a.error == math.inf and a.gain == math.inf and a.nonfinite == 1 and a.exceeds_low_range
    assert b.gain == 0.0  # its input was already broken: it adds nothing
    assert result.first_bad is a and [n.name for n in result.overflowing()] == ["a", "b"]


def test_range_findings_name_outputs_inputs_and_constants() -> None:
    values = {"x": 1e5, "va": 1.0, "vb": 2e5, "vc": 1.0}  # the peaks a calibration records
    constants = {"c": np.array([7e4], np.float32), "w": np.array([1.0], np.float32)}
    findings = range_findings(CHAIN, values, constants, 65504.0)
    assert [(f.node, f.value, f.kind) for f in findings] == [
        ("a", "x", "input"),
        ("b", "vb", "output"),
        ("b", "c", "constant"),
        ("c", "vb", "input"),
    ]
    kept = overflow_nodes(findings)
    assert list(kept) == ["a", "b", "c"] and kept["b"].count("calibration") == 2
    # A constant is known exactly: it counts when it leaves float16 itself, whatever the margin of activations.
    assert [(f.node, f.value) for f in range_findings(CHAIN, values, constants, 1e6)] == [("b", "c")]
    # float32's extremes are stand-ins for infinity (a mask's fill): a constant of them is no finding (a peak
    # never holds them: the calibration leaves them out)
    masked = {**values, "x": 1.0, "vb": 1.0}
    assert range_findings(CHAIN, masked, {"c": np.array([-3.4e38, 0.0], np.float32)}, 65504.0) == []


def _bf16_model() -> onnx.ModelProto:
    nodes = [
        oh.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16, name="to_bf16"),
        oh.make_node("Identity", ["xb"], ["sq"], name="same"),  # ORT's CPU provider has few bfloat16 kernels
        oh.make_node("Cast", ["sq"], ["y"], to=TensorProto.FLOAT, name="to_f32"),
    ]
    graph = oh.make_graph(
        nodes,
        "bf16",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.ones(3, np.float32), "unused_w")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_expose_values_reads_back_bfloat16_through_an_exact_cast() -> None:
    model = _bf16_model()
    before = model.SerializeToString()
    exposed = expose_values(model, ["xb", "sq", "y", "x", "nope"])
    assert model.SerializeToString() == before  # the input model is not touched
    names = [value.name for value in exposed.graph.output]
    assert names == ["y", "xb" + EXPOSED_FLOAT32_SUFFIX, "sq" + EXPOSED_FLOAT32_SUFFIX]
    onnx.checker.check_model(exposed, full_check=True)
    run = run_with_intermediates(model, {"x": np.array([1.5, 3.0, 90000.0], np.float32)})
    assert set(run.values) >= {"x", "xb", "sq", "y"} and run.values["sq"].dtype == np.float32
    np.testing.assert_array_equal(run.values["sq"], run.outputs["y"])
    assert run.values["xb"][2] == 90112.0  # 90000 rounded to bfloat16's 8-bit mantissa
    assert [n.name for n in graph_nodes(model)] == ["to_bf16", "same", "to_f32"]
    assert set(float_constants(model)) == {"unused_w"}


def test_written_mixlists_are_valid_for_every_base_combination() -> None:
    lists = load_ops_info("cpu").lists()
    bases = [
        None,
        parse_mixlist('{"white-list": {"to-add": ["Pow"]}, "black-list": {"to-remove": ["Pow"]}}'),
        parse_mixlist('{"gray-list": {"to-add": ["MatMul"]}, "white-list": {"to-remove": ["MatMul"]}}'),
        parse_mixlist('{"black-list": {"to-add": ["Softmax"]}, "white-list": {"to-add": ["Add"]}}'),
    ]
    for base in bases:
        data = mixlist_data(base, ["Pow", "MatMul", "Add"])
        mixlist = Mixlist.model_validate(data)
        applied, _ = apply_mixlist(lists, mixlist)  # raises on an invalid combination
        for op in ("Pow", "MatMul", "Add"):
            assert applied.colour_of(op).value == "black"
    assert keep_dtype_lines(["a", "OpType::Relu"], frozenset({"c", "b", "a"})) == ["a", "OpType::Relu", "b", "c"]
