"""Compare ampconfig with its peers: conversion time and memory, validity on ONNX's node tests, GPU latency, and
time and peak memory on a > 2 GB model with external data.

Peers (both with keep_io_types=True):
  occ          onnxconverter-common ``float16.convert_float_to_float16`` (``pip install onnxconverter-common``)
  ort-float16  onnxruntime's ``onnxruntime.transformers.float16.convert_float_to_float16``
ampconfig runs as ``allow_mix_precision`` and ``force_fp16`` for target cpu (target cuda in the GPU part).

Run by hand, not by the test suite:

  python benchmarks/compare_peers.py --parts time,memory,validity,profile,gpu,large,e2e --repeat 3 --json bench.json

Parts:
  e2e           What a user meets: each tool from one model file to another in a fresh process, under
                ``/usr/bin/time`` (wall time around the process, peak RSS of the process): ``ampconfig rewrite
                --precision-mode MODE`` (its defaults otherwise: target cuda), each peer's own ``python -c`` (load,
                convert with keep_io_types=True, save) and the I/O floor (``onnx.save(onnx.load(m), out)``). One
                untimed round warms the page cache and bytecode caches and checks every output (full checker, ONNX
                Runtime loads it); then ``--e2e-rounds`` rounds, one run of each tool per round, the order rotated;
                best of the rounds, with the load average at each round; then ``ampconfig explain`` and ``run``
                (``--e2e-memory-commands``) once each for their peak memory. Models are built once in
                ``--e2e-folder``.
  time, memory  BERT-base, GPT-2 small, ViT-B/16, ResNet50 and synthetic graphs of 25k/50k/100k nodes (``--models``).
                One fresh subprocess per (model, tool): build/load the model, then convert ``--repeat`` times from
                an in-memory ModelProto to a ModelProto (each run gets a fresh copy, made outside the timer, since
                a converter may mutate its input). Memory is the first conversion's peak RSS above the RSS after
                loading: the kernel's high-water mark is reset (``/proc/self/clear_refs`` = 5) after the load, so
                VmHWM (the counter behind ``getrusage().ru_maxrss``, without the parent's RSS that ru_maxrss
                inherits across fork+exec) sees the conversion alone. RSS, not tracemalloc: protobuf's C++
                allocations are invisible to tracemalloc, and it slows Python down several times.
  validity      every float32 case of ``tests/node_cases.py``: converter raised, checker(full_check) rejects
                (with a complaint the input does not have: test_mvn's input fails it already), ORT refuses to
                load/run, matches expected within rtol=atol=1e-2 (each row counted on its own,
                like docs/anchors: a model the checker rejects is still offered to ORT).
  profile       cProfile of ampconfig allow_mix_precision on the BERT-size model, top entries by cumulative time.
  gpu           ResNet50 / ViT-B/16 / BERT-base / GPT-2 built here, latency (ORT CUDA EP, IOBinding, median of 50)
                and rel-L2 error against fp32, for fp32, each peer and ampconfig. Runs only when a real CUDA session
                can be built; ``--gpu-smoke-on-cpu`` runs the same code on the CPU EP with tiny batches to test it.
  large         ``benchmarks/large_model.py``'s comparison: a chain of ``--large-layers`` MatMuls with float32
                ``--large-width``² weights in an external data file (default 10 x 8192² = 2.68 GB, built once in
                ``--large-folder``), converted to float16 by each tool in a fresh process under ``/usr/bin/time -v``
                (wall time, peak RSS). Every ``ampconfig:*`` tool is one row, the CLI's ``rewrite --precision-mode
                force_fp16``; the peers load with external data, convert and save with external data. Each output
                is checked with ``check_model(path, full_check=True)``.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import datetime
import gc
import io
import json
import os
import platform
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

BENCHMARKS = Path(__file__).resolve().parent
REPO = BENCHMARKS.parent
# tests/node_cases.py is the conformance corpus; large_model.py the > 2 GB part. Appended, not put first, so that
# PYTHONPATH=<another checkout> measures that checkout's ampconfig rather than this script's.
for folder in (REPO, BENCHMARKS):
    if str(folder) not in sys.path:
        sys.path.append(str(folder))

IR_VERSION = 10  # ORT 1.31 reads IR <= 13; onnx 1.23's make_model would stamp 14
OPSET = 17
TOOLS = ("ampconfig:allow_mix_precision", "ampconfig:force_fp16", "occ", "ort-float16")
ALL_PARTS = ("time", "memory", "validity", "profile", "gpu", "large", "e2e")
DEFAULT_PARTS = ("time", "memory", "validity", "profile", "gpu", "large", "e2e")
SYNTHETIC_SIZES = (25_000, 50_000, 100_000)


# --------------------------------------------------------------------------------------------------------------
# Model builders (onnx.helper, random weights): transformer stacks with the op mix real exports have.
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformerSize:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    ffn: int = 3072
    vocab: int = 30522
    max_positions: int = 512


class GraphBuilder:
    """Collects nodes and initializers; every node gets a unique name and output."""

    def __init__(self, seed: int = 0) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self._count = 0

    def node(self, op: str, inputs: Sequence[str], outputs: int = 1, **attrs: Any) -> Any:
        self._count += 1
        name = f"{op.lower()}_{self._count}"
        names = [f"{name}_out{i}" if outputs > 1 else f"{name}_out" for i in range(outputs)]
        self.nodes.append(oh.make_node(op, list(inputs), names, name=name, **attrs))
        return names if outputs > 1 else names[0]

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def weight(self, name: str, *shape: int, scale: float = 0.02) -> str:
        return self.const(name, self.rng.standard_normal(shape, dtype=np.float32) * scale)

    def linear(self, x: str, prefix: str, n_in: int, n_out: int) -> str:
        y = self.node("MatMul", [x, self.weight(f"{prefix}.weight", n_in, n_out)])
        return self.node("Add", [y, self.const(f"{prefix}.bias", np.zeros(n_out))])

    def model(
        self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
    ) -> onnx.ModelProto:
        graph = oh.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        return model


def _layer_norm(b: GraphBuilder, x: str, prefix: str, hidden: int, decomposed: bool) -> str:
    gamma = b.const(f"{prefix}.gamma", np.ones(hidden))
    beta = b.const(f"{prefix}.beta", np.zeros(hidden))
    if not decomposed:
        return b.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)
    # The form older exporters emit: ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, Mul, Add.
    mean = b.node("ReduceMean", [x], axes=[-1])
    centred = b.node("Sub", [x, mean])
    var = b.node("ReduceMean", [b.node("Pow", [centred, b.const(f"{prefix}.two", 2.0)])], axes=[-1])
    std = b.node("Sqrt", [b.node("Add", [var, b.const(f"{prefix}.eps", 1e-5)])])
    return b.node("Add", [b.node("Mul", [b.node("Div", [centred, std]), gamma]), beta])


def _gelu_erf(b: GraphBuilder, x: str, prefix: str) -> str:
    erf = b.node("Erf", [b.node("Div", [x, b.const(f"{prefix}.sqrt2", np.sqrt(2.0))])])
    inner = b.node("Add", [erf, b.const(f"{prefix}.one", 1.0)])
    return b.node("Mul", [b.node("Mul", [x, inner]), b.const(f"{prefix}.half", 0.5)])


def _gelu_tanh(b: GraphBuilder, x: str, prefix: str) -> str:
    # GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
    cube = b.node("Mul", [b.node("Pow", [x, b.const(f"{prefix}.three", 3.0)]), b.const(f"{prefix}.c", 0.044715)])
    scaled = b.node("Mul", [b.node("Add", [x, cube]), b.const(f"{prefix}.k", np.sqrt(2.0 / np.pi))])
    inner = b.node("Add", [b.node("Tanh", [scaled]), b.const(f"{prefix}.one", 1.0)])
    return b.node("Mul", [b.node("Mul", [x, inner]), b.const(f"{prefix}.half", 0.5)])


def _split_heads(b: GraphBuilder, x: str, heads_shape: str, perm: list[int]) -> str:
    return b.node("Transpose", [b.node("Reshape", [x, heads_shape])], perm=perm)


def _attention(b: GraphBuilder, q: str, k: str, v: str, size: TransformerSize, prefix: str, bias: str) -> str:
    """Multi-head attention as exporters write it: Reshape/Transpose per head, QK^T, scale, mask, Softmax, AV."""
    head_dim = size.hidden // size.heads
    heads_shape = b.const(f"{prefix}.heads_shape", [0, 0, size.heads, head_dim], np.int64)
    qh = _split_heads(b, q, heads_shape, [0, 2, 1, 3])
    kt = _split_heads(b, k, heads_shape, [0, 2, 3, 1])
    vh = _split_heads(b, v, heads_shape, [0, 2, 1, 3])
    scores = b.node("Div", [b.node("MatMul", [qh, kt]), b.const(f"{prefix}.scale", np.sqrt(head_dim))])
    probs = b.node("Softmax", [b.node("Add", [scores, bias])], axis=-1)
    ctx = b.node("Transpose", [b.node("MatMul", [probs, vh])], perm=[0, 2, 1, 3])
    merged = b.node("Reshape", [ctx, b.const(f"{prefix}.merge_shape", [0, 0, size.hidden], np.int64)])
    return b.linear(merged, f"{prefix}.out", size.hidden, size.hidden)


def _positions(b: GraphBuilder, ids: str) -> str:
    """Position ids 0..seq-1 from the input's shape (Shape, Gather, Range), as exports compute them."""
    seq = b.node("Gather", [b.node("Shape", [ids]), b.const("seq_axis", 1, np.int64)], axis=0)
    return b.node("Range", [b.const("range_start", 0, np.int64), seq, b.const("range_step", 1, np.int64)])


def build_bert(size: TransformerSize = TransformerSize(), seed: int = 0) -> onnx.ModelProto:
    """BERT-base-sized post-LN encoder: word/position/type embeddings, extended attention mask, 12 layers,
    LayerNormalization, Erf GELU, pooler (Gather CLS, MatMul, Tanh)."""
    b = GraphBuilder(seed)
    h = size.hidden
    word = b.node("Gather", [b.weight("embeddings.word", size.vocab, h), "input_ids"])
    pos = b.node("Gather", [b.weight("embeddings.position", size.max_positions, h), _positions(b, "input_ids")])
    typ = b.node("Gather", [b.weight("embeddings.type", 2, h), "token_type_ids"])
    x = _layer_norm(b, b.node("Add", [b.node("Add", [word, pos]), typ]), "embeddings.ln", h, decomposed=False)
    # Extended mask: (1 - mask[:, None, None, :]) * -10000, as HF BERT exports it.
    mask = b.node("Cast", [b.node("Unsqueeze", ["attention_mask", b.const("mask_axes", [1, 2], np.int64)])], to=1)
    bias = b.node("Mul", [b.node("Sub", [b.const("mask_one", 1.0), mask]), b.const("mask_fill", -10000.0)])
    for layer in range(size.layers):
        p = f"layer{layer}"
        q, k, v = (b.linear(x, f"{p}.{n}", h, h) for n in ("query", "key", "value"))
        attn = _attention(b, q, k, v, size, f"{p}.attn", bias)
        x = _layer_norm(b, b.node("Add", [attn, x]), f"{p}.ln1", h, decomposed=False)
        ffn = b.linear(_gelu_erf(b, b.linear(x, f"{p}.fc1", h, size.ffn), p), f"{p}.fc2", size.ffn, h)
        x = _layer_norm(b, b.node("Add", [ffn, x]), f"{p}.ln2", h, decomposed=False)
    cls = b.node("Gather", [x, b.const("cls_index", 0, np.int64)], axis=1)
    pooled = b.node("Tanh", [b.linear(cls, "pooler", h, h)])
    b.nodes.append(oh.make_node("Identity", [x], ["last_hidden_state"], name="out_hidden"))
    b.nodes.append(oh.make_node("Identity", [pooled], ["pooler_output"], name="out_pooled"))
    ids = [oh.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in ("input_ids", "token_type_ids")]
    return b.model(
        "bert_base_like",
        [*ids, oh.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [
            oh.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", h]),
            oh.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", h]),
        ],
    )


def build_gpt2(
    size: TransformerSize = TransformerSize(vocab=50257, max_positions=1024), seed: int = 1
) -> onnx.ModelProto:
    """GPT-2-small-sized pre-LN decoder: fused QKV + Split, causal mask sliced from a bias buffer (Where),
    decomposed LayerNorm (ReduceMean/Pow/Sqrt), tanh GELU, LM head tied to the word embedding (Transpose)."""
    b = GraphBuilder(seed)
    h = size.hidden
    wte = b.weight("wte", size.vocab, h)
    x = b.node(
        "Add",
        [
            b.node("Gather", [wte, "input_ids"]),
            b.node("Gather", [b.weight("wpe", size.max_positions, h), _positions(b, "input_ids")]),
        ],
    )
    # The causal mask: a [1, 1, max, max] boolean buffer sliced to [seq, seq], then Where(mask, scores, -inf-ish).
    seq = b.node(
        "Unsqueeze",
        [
            b.node("Gather", [b.node("Shape", ["input_ids"]), b.const("seq_axis2", 1, np.int64)], axis=0),
            b.const("zero_axis", [0], np.int64),
        ],
    )
    tri = np.tril(np.ones((size.max_positions, size.max_positions), dtype=bool))[None, None]
    axes = b.const("mask_slice_axes", [2, 3], np.int64)
    starts = b.const("mask_slice_starts", [0, 0], np.int64)
    ends = b.node("Concat", [seq, seq], axis=0)
    causal = b.node("Slice", [b.const("causal_bias", tri, bool), starts, ends, axes])
    bias = b.node("Where", [causal, b.const("mask_zero", 0.0), b.const("mask_fill", -10000.0)])
    split = b.const("qkv_split", [h, h, h], np.int64)
    for layer in range(size.layers):
        p = f"h{layer}"
        qkv = b.linear(_layer_norm(b, x, f"{p}.ln_1", h, decomposed=True), f"{p}.attn.c_attn", h, 3 * h)
        q, k, v = b.node("Split", [qkv, split], outputs=3, axis=-1)
        x = b.node("Add", [x, _attention(b, q, k, v, size, f"{p}.attn", bias)])
        hidden = _gelu_tanh(
            b, b.linear(_layer_norm(b, x, f"{p}.ln_2", h, decomposed=True), f"{p}.mlp.c_fc", h, size.ffn), p
        )
        x = b.node("Add", [x, b.linear(hidden, f"{p}.mlp.c_proj", size.ffn, h)])
    final = _layer_norm(b, x, "ln_f", h, decomposed=True)
    b.nodes.append(oh.make_node("MatMul", [final, b.node("Transpose", [wte], perm=[1, 0])], ["logits"], name="lm_head"))
    return b.model(
        "gpt2_small_like",
        [oh.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [oh.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", size.vocab])],
    )


#: One block of the synthetic graph: 10 nodes mixing white, black, gray and clear ops, with a residual.
SYNTHETIC_BLOCK_NODES = 10


def build_synthetic(nodes: int, width: int = 16, seed: int = 2) -> onnx.ModelProto:
    """A chain of ``nodes // 10`` blocks (MatMul, Add, Relu, Mul, Softmax, Transpose x2, Sub, Tanh,
    LayerNormalization), each with its own small weights: a long graph of small tensors, to see how each tool's
    time grows with node count."""
    b = GraphBuilder(seed)
    gamma = b.const("ln.gamma", np.ones(width))
    beta = b.const("ln.beta", np.zeros(width))
    x = "x"
    for block in range(nodes // SYNTHETIC_BLOCK_NODES):
        p = f"b{block}"
        y = b.node(
            "Add",
            [b.node("MatMul", [x, b.weight(f"{p}.w", width, width, scale=0.2)]), b.const(f"{p}.b", np.zeros(width))],
        )
        y = b.node("Mul", [b.node("Relu", [y]), b.const(f"{p}.s", 0.5)])
        y = b.node("Transpose", [b.node("Transpose", [b.node("Softmax", [y], axis=-1)], perm=[1, 0])], perm=[1, 0])
        y = b.node("Tanh", [b.node("Sub", [y, x])])
        x = b.node("LayerNormalization", [y, gamma, beta], axis=-1)
    b.nodes.append(oh.make_node("Identity", [x], ["y"], name="out"))
    return b.model(
        f"synthetic_{nodes}",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, width])],
    )


def model_builders() -> dict[str, Callable[[], onnx.ModelProto]]:
    # build_vit and build_resnet50 are defined with the GPU part below; they are looked up when this is called.
    builders: dict[str, Callable[[], onnx.ModelProto]] = {
        "bert-base": build_bert,
        "gpt2-small": build_gpt2,
        "vit-b16": build_vit,
        "resnet50": build_resnet50,
    }
    for size in SYNTHETIC_SIZES:
        builders[f"synthetic-{size // 1000}k"] = lambda size=size: build_synthetic(size)
    return builders


# --------------------------------------------------------------------------------------------------------------
# The converters, each from an in-memory ModelProto to a ModelProto.
# --------------------------------------------------------------------------------------------------------------


#: A tool name's suffix that turns ampconfig's load check off (``ampconfig:force_fp16/no-load-check``): the peers
#: load nothing, so the comparison is made both ways and the check's cost said beside it.
NO_LOAD_CHECK = "/no-load-check"


def _ampconfig_mode(tool: str) -> tuple[str, bool]:
    """The precision mode an ``ampconfig:MODE[/no-load-check]`` tool runs, and whether it checks the load."""
    mode = tool.split(":", 1)[1]
    return mode.removesuffix(NO_LOAD_CHECK), not mode.endswith(NO_LOAD_CHECK)


def converter(tool: str, target: str = "cpu") -> Callable[[onnx.ModelProto], onnx.ModelProto]:
    """The tool as a function; imports happen here, outside any timer."""
    if tool.startswith("ampconfig:"):
        from ampconfig import rewrite_model

        mode, checked = _ampconfig_mode(tool)
        return lambda model: rewrite_model(model, mode, target=target, load_check=checked)
    if tool == "occ":
        from onnxconverter_common import float16 as occ_float16

        return lambda model: occ_float16.convert_float_to_float16(model, keep_io_types=True)
    if tool == "ort-float16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        return lambda model: convert_float_to_float16(model, keep_io_types=True)
    raise SystemExit(f"unknown tool {tool!r}; tools: {', '.join(TOOLS)}")


# --------------------------------------------------------------------------------------------------------------
# Time and memory: one subprocess per (model, tool).
# --------------------------------------------------------------------------------------------------------------


def _status_kib(field_name: str) -> int | None:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return None


def _peak_kib() -> int:
    """The RSS high-water mark. VmHWM, not ru_maxrss: after exec, getrusage's maxrss also holds the parent's RSS at
    fork time (the kernel keeps it in signal->maxrss), which hid every conversion below ~2 GB in the first run."""
    hwm = _status_kib("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark (Linux >= 4.0) so ru_maxrss measures only what follows."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def worker(model_path: str, tool: str, repeat: int) -> dict[str, Any]:
    """Runs inside the subprocess: load, convert ``repeat`` times, report times and the first run's peak RSS."""
    convert = converter(tool)
    model = onnx.load(model_path)
    copies = [copy.deepcopy(model) for _ in range(repeat)] if not tool.startswith("ampconfig:") else [model] * repeat
    gc.collect()
    reset = _reset_peak_rss()
    baseline_kib = (_status_kib("VmRSS") if reset else None) or _peak_kib()
    times = []
    peak_kib = 0
    for index, source in enumerate(copies):
        start = time.perf_counter()
        result = convert(source)
        times.append(time.perf_counter() - start)
        if index == 0:
            peak_kib = _peak_kib()
            output_bytes = result.ByteSize()
        del result
        copies[index] = None  # type: ignore[call-overload]  # a peer's mutated copy is not reused
        gc.collect()
    return {
        "times_s": times,
        "peak_delta_bytes": (peak_kib - baseline_kib) * 1024,
        "peak_method": "VmHWM after a clear_refs reset - VmRSS after load" if reset else "VmHWM - VmHWM after load",
        "model_bytes": model.ByteSize(),
        "output_bytes": output_bytes,
    }


#: A tool name's prefix that runs the tool from another checkout (``--checkout-before``), so a change is timed
#: against its base in the same run: ``before:ampconfig:allow_mix_precision/no-load-check``.
BEFORE = "before:"


def run_worker(
    model_path: Path, tool: str, repeat: int, timeout_s: float, before: Path | None = None
) -> dict[str, Any]:
    env = dict(os.environ)
    if tool.startswith(BEFORE):
        if before is None:
            raise SystemExit(f"tool {tool!r} needs --checkout-before")
        env["PYTHONPATH"] = os.pathsep.join([str(before), *filter(None, [env.get("PYTHONPATH")])])
    command = [sys.executable, __file__, "--worker", str(model_path), tool.removeprefix(BEFORE), str(repeat)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
        return {"error": f"exit {done.returncode}: {tail[0][:300]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_and_memory(
    models: Sequence[str],
    tools: Sequence[str],
    repeat: int,
    timeout_s: float,
    rounds: int = 1,
    before: Path | None = None,
) -> dict[str, Any]:
    """Each tool in a fresh process per model and round, the tools in turn within a round (``rounds`` > 1: the
    order rotated each round, a tool's time the best of its rounds' medians, the other rounds kept in ``rounds``)."""
    results: dict[str, Any] = {}
    builders = model_builders()
    with tempfile.TemporaryDirectory(prefix="ampconfig-bench-") as folder:
        for name in models:
            model = builders[name]()
            path = Path(folder) / f"{name}.onnx"
            onnx.save(model, str(path))
            info: dict[str, Any] = {"nodes": len(model.graph.node), "bytes": model.ByteSize(), "tools": {}}
            del model
            for round_index in range(rounds):
                shift = round_index % len(tools)
                for tool in [*tools[shift:], *tools[:shift]]:
                    print(f"  {name:15s} {tool:30s} ...", end="", flush=True, file=sys.stderr)
                    row = run_worker(path, tool, repeat, timeout_s, before)
                    if "times_s" in row:
                        row["median_s"] = statistics.median(row["times_s"])
                        row["load_average"] = os.getloadavg()[0]
                    print(f" {row.get('median_s', row.get('error'))}", file=sys.stderr)
                    info["tools"].setdefault(tool, {"rounds": []})["rounds"].append(row)
            for tool, entry in info["tools"].items():
                timed = [row for row in entry["rounds"] if "median_s" in row]
                best = min(timed, key=lambda row: row["median_s"]) if timed else entry["rounds"][0]
                info["tools"][tool] = {**best, "rounds": entry["rounds"]}
            results[name] = info
    return results


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:.3f}" if seconds < 10 else f"{seconds:.1f}"


def _is_ampconfig(tool: str) -> bool:
    return tool.removeprefix(BEFORE).startswith("ampconfig:")


def time_table(results: dict[str, Any], tools: Sequence[str]) -> str:
    """Each tool's time, then each peer's time over each ampconfig tool's."""
    # Built as a list: with only ampconfig tools there are no ratio columns (joining an empty list left a blank one).
    peers = [t for t in tools if not _is_ampconfig(t)]
    bases = [t for t in tools if _is_ampconfig(t)]
    columns = ["model", "nodes", "MB", *(f"{t} s" for t in tools)]
    columns += [f"{peer} / {base}" for peer in peers for base in bases]
    header = "| " + " | ".join(columns) + " |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for name, info in results.items():
        rows = info["tools"]
        cells = [name, f"{info['nodes']:,}", f"{info['bytes'] / 1e6:.0f}"]
        cells += [_fmt_s(rows[t].get("median_s")) if "median_s" in rows[t] else rows[t]["error"] for t in tools]
        for peer_tool in peers:
            for base_tool in bases:
                peer, base = rows[peer_tool].get("median_s"), rows.get(base_tool, {}).get("median_s")
                cells.append(f"{peer / base:.1f}×" if peer and base else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def memory_table(results: dict[str, Any], tools: Sequence[str]) -> str:
    header = "| model | model MB | " + " | ".join(f"{t} peak MB (× model)" for t in tools) + " |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for name, info in results.items():
        cells = [name, f"{info['bytes'] / 1e6:.0f}"]
        for tool in tools:
            row = info["tools"][tool]
            if "peak_delta_bytes" not in row:
                cells.append(row.get("error", "—"))
                continue
            delta = row["peak_delta_bytes"]
            cells.append(f"{delta / 1e6:.0f} ({delta / info['bytes']:.2f}×)")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def linearity_note(results: dict[str, Any], tools: Sequence[str]) -> str:
    """Seconds per 1,000 nodes at each synthetic size: flat means linear."""
    synthetic = [(info["nodes"], info["tools"]) for name, info in results.items() if name.startswith("synthetic")]
    if len(synthetic) < 2:
        return "(needs at least two synthetic models in --models)"
    lines = ["| tool | " + " | ".join(f"ms per 1k nodes @ {n:,}" for n, _ in synthetic) + " |"]
    lines.append("|" + "---|" * (len(synthetic) + 1))
    for tool in tools:
        cells = [tool]
        for nodes, rows in synthetic:
            median = rows[tool].get("median_s")
            cells.append(f"{median / nodes * 1e6:.1f}" if median else rows[tool].get("error", "—"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# Validity on ONNX's node test cases.
# --------------------------------------------------------------------------------------------------------------


@dataclass
class ValidityCounts:
    tool: str
    counts: Counter = field(default_factory=Counter)
    seconds: float = 0.0


def _classify_case(case: Any, convert: Callable[[onnx.ModelProto], onnx.ModelProto], counts: Counter) -> None:
    from ampconfig.errors import AmpconfigError
    from tests.node_cases import _session, new_checker_complaint, outputs_match

    counts["cases"] += 1
    try:
        converted = convert(copy.deepcopy(case.model))
    except AmpconfigError:
        counts["refused with a clear error"] += 1  # ampconfig's documented refusals, not crashes
        return
    except Exception:
        counts["converter raised"] += 1
        return
    if new_checker_complaint(case.model, converted) is not None:
        counts["checker rejects"] += 1
    try:
        got = _session(converted).run(None, case.feeds)
    except Exception:
        counts["ORT refuses to load/run"] += 1
        return
    if not case.reference_matches:
        counts["fp32 reference itself off"] += 1
    elif outputs_match(got, case.expected):
        counts["matches within 1e-2"] += 1
    else:
        counts["runs, outside 1e-2"] += 1


def validity(tools: Sequence[str]) -> list[ValidityCounts]:
    from tests.node_cases import float32_cases

    cases = float32_cases()
    reports = []
    for tool in tools:
        convert = converter(tool)
        report = ValidityCounts(tool)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for case in cases:
                _classify_case(case, convert, report.counts)
        report.seconds = time.perf_counter() - start
        print(f"  validity {tool}: {dict(report.counts)}", file=sys.stderr)
        reports.append(report)
    return reports


VALIDITY_ROWS = (
    "cases",
    "converter raised",
    "refused with a clear error",
    "checker rejects",
    "ORT refuses to load/run",
    "matches within 1e-2",
    "runs, outside 1e-2",
    "fp32 reference itself off",
)


def validity_table(reports: Sequence[ValidityCounts]) -> str:
    lines = ["| | " + " | ".join(r.tool for r in reports) + " |", "|---|" + "---|" * len(reports)]
    for row in VALIDITY_ROWS:
        lines.append(f"| {row} | " + " | ".join(f"{r.counts[row]:,}" for r in reports) + " |")
    lines.append("| seconds for the corpus | " + " | ".join(f"{r.seconds:.0f}" for r in reports) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# Profile: where ampconfig's time goes on the BERT-size model.
# --------------------------------------------------------------------------------------------------------------


#: The phases of ``rewrite_model_detailed`` as (file suffix, function) in the profile.
PHASES: tuple[tuple[str, str, str], ...] = (
    (
        "admit_input_model (full check + type inference of the input)",
        "ampconfig/model_io/repair.py",
        "admit_input_model",
    ),
    ("light_proto (graph-only copies for the checks)", "ampconfig/model_io/models.py", "light_proto"),
    ("checker_complaint (full_check of the output)", "ampconfig/model_io/node_checks.py", "checker_complaint"),
    ("onnx-ir deserialize_model", "onnx_ir/serde.py", "deserialize_model"),
    ("name_unnamed_nodes", "ampconfig/rewrite/names.py", "name_unnamed_nodes"),
    ("annotate_dtypes", "ampconfig/rewrite/types.py", "annotate_dtypes"),
    ("build_plan (facts, policy, painting)", "ampconfig/decide/plan.py", "build_plan"),
    ("apply_plan (rewrite)", "ampconfig/rewrite/apply.py", "apply_plan"),
    (
        "skeleton_of (the output serialised once, without its large weights)",
        "ampconfig/model_io/skeleton.py",
        "skeleton_of",
    ),
    ("full_proto (the API's proto: weights converted and copied in)", "ampconfig/model_io/skeleton.py", "full_proto"),
    ("… of which float32 -> float16 casts (ORT kernel)", "ampconfig/rewrite/float_cast.py", "float32_to_float16"),
)


def _phase_rows(stats: pstats.Stats, total: float) -> list[str]:
    """Cumulative seconds and calls per phase. Phases nest (the checks serialize through onnx-ir), so shares do
    not add up to 100%; a deserialize count above 2 means checker repair rounds."""
    rows = ["| phase | calls | cumulative s | share |", "|---|---|---|---|"]
    for label, suffix, name in PHASES:
        hits = [v for (f, _, fn), v in stats.stats.items() if fn == name and f.endswith(suffix)]  # type: ignore[attr-defined]
        calls, seconds = sum(v[1] for v in hits), sum(v[3] for v in hits)
        rows.append(f"| {label} | {calls} | {seconds:.3f} | {seconds / total:.0%} |")
    return rows


def profile(
    models: Sequence[str] = ("bert-base", "gpt2-small"), mode: str = "allow_mix_precision", top: int = 25
) -> str:
    from ampconfig import rewrite_model

    rewrite_model(build_synthetic(100), mode, target="cpu")  # warm caches (op info, schemas) outside the profile
    builders = model_builders()
    parts = []
    for name in models:
        model = builders[name]()
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        rewrite_model(model, mode, target="cpu")
        profiler.disable()
        total = time.perf_counter() - start
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(top)
        parts.append(f"ampconfig {mode} on {name}: {total:.2f} s wall under cProfile")
        parts.extend(_phase_rows(stats, total))
        parts.append("\n" + _trim_pstats(text.getvalue()) + "\n")
    return "\n".join(parts)


def _trim_pstats(text: str) -> str:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("ncalls")), 0)
    return "\n".join(line.replace(str(REPO) + "/", "").replace(sys.prefix, "<venv>") for line in lines[start:] if line)


# --------------------------------------------------------------------------------------------------------------
# GPU: latency and error of the converted models (only with a working CUDA session).
# --------------------------------------------------------------------------------------------------------------


def build_resnet50(seed: int = 3) -> onnx.ModelProto:
    """ResNet50 v1.5 (Conv/BatchNormalization/Relu/MaxPool/Add/GlobalAveragePool/Flatten/Gemm), random weights."""
    b = GraphBuilder(seed)

    def conv_bn(x: str, prefix: str, c_in: int, c_out: int, k: int, stride: int, relu: bool = True) -> str:
        w = b.weight(f"{prefix}.w", c_out, c_in, k, k, scale=float(np.sqrt(2.0 / (c_in * k * k))))
        y = b.node("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        stats = [
            b.const(f"{prefix}.{n}", np.full(c_out, v)) for n, v in (("g", 1.0), ("b", 0.0), ("m", 0.0), ("v", 1.0))
        ]
        y = b.node("BatchNormalization", [y, *stats])
        return b.node("Relu", [y]) if relu else y

    x = b.node("MaxPool", [conv_bn("images", "stem", 3, 64, 7, 2)], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    c_in = 64
    for stage, (blocks, width) in enumerate(((3, 64), (4, 128), (6, 256), (3, 512))):
        for block in range(blocks):
            p, stride = f"s{stage}b{block}", (2 if block == 0 and stage > 0 else 1)
            y = conv_bn(
                conv_bn(conv_bn(x, f"{p}.c1", c_in, width, 1, 1), f"{p}.c2", width, width, 3, stride),
                f"{p}.c3",
                width,
                width * 4,
                1,
                1,
                relu=False,
            )
            short = conv_bn(x, f"{p}.down", c_in, width * 4, 1, stride, relu=False) if block == 0 else x
            x, c_in = b.node("Relu", [b.node("Add", [y, short])]), width * 4
    pooled = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    b.nodes.append(
        oh.make_node(
            "Gemm",
            [pooled, b.weight("fc.w", 1000, 2048), b.const("fc.b", np.zeros(1000))],
            ["logits"],
            name="fc",
            transB=1,
        )
    )
    return b.model(
        "resnet50_like",
        [oh.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [oh.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1000])],
    )


def build_vit(
    size: TransformerSize = TransformerSize(), patch: int = 16, image: int = 224, seed: int = 4
) -> onnx.ModelProto:
    """ViT-B/16: Conv patch embedding, CLS token (Concat), position embedding, 12 pre-LN layers, Erf GELU."""
    b = GraphBuilder(seed)
    h, tokens = size.hidden, (image // patch) ** 2
    patches = b.node(
        "Conv", ["images", b.weight("patch.w", h, 3, patch, patch)], kernel_shape=[patch, patch], strides=[patch, patch]
    )
    seq = b.node(
        "Transpose", [b.node("Reshape", [patches, b.const("flat_shape", [0, h, tokens], np.int64)])], perm=[0, 2, 1]
    )
    batch = b.node("Slice", [b.node("Shape", ["images"]), b.const("s0", [0], np.int64), b.const("s1", [1], np.int64)])
    cls_shape = b.node("Concat", [batch, b.const("cls_rest", [1, h], np.int64)], axis=0)
    cls = b.node("Expand", [b.weight("cls", 1, 1, h), cls_shape])
    x = b.node("Add", [b.node("Concat", [cls, seq], axis=1), b.weight("pos", 1, tokens + 1, h)])
    no_mask = b.const("no_mask", 0.0)
    for layer in range(size.layers):
        p = f"l{layer}"
        ln = _layer_norm(b, x, f"{p}.ln1", h, decomposed=False)
        q, k, v = (b.linear(ln, f"{p}.{n}", h, h) for n in ("q", "k", "v"))
        x = b.node("Add", [x, _attention(b, q, k, v, size, f"{p}.attn", no_mask)])
        ln = _layer_norm(b, x, f"{p}.ln2", h, decomposed=False)
        x = b.node(
            "Add", [x, b.linear(_gelu_erf(b, b.linear(ln, f"{p}.fc1", h, size.ffn), p), f"{p}.fc2", size.ffn, h)]
        )
    cls_out = b.node(
        "Gather", [_layer_norm(b, x, "ln_f", h, decomposed=False), b.const("cls_index", 0, np.int64)], axis=1
    )
    b.nodes.append(
        oh.make_node(
            "Gemm",
            [cls_out, b.weight("head.w", 1000, h), b.const("head.b", np.zeros(1000))],
            ["logits"],
            name="head",
            transB=1,
        )
    )
    return b.model(
        "vit_b16_like",
        [oh.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, image, image])],
        [oh.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1000])],
    )


def _gpu_feeds(name: str, batch: int, seq: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    if name in ("resnet50", "vit-b16"):
        return {"images": rng.standard_normal((batch, 3, 224, 224), dtype=np.float32)}
    if name == "bert-base":
        return {
            "input_ids": rng.integers(0, 30522, (batch, seq), dtype=np.int64),
            "token_type_ids": np.zeros((batch, seq), np.int64),
            "attention_mask": np.ones((batch, seq), np.int64),
        }
    return {"input_ids": rng.integers(0, 50257, (batch, seq), dtype=np.int64)}


#: (builder, batch, seq) as in docs/anchors; the smoke run on CPU uses batch 1 and short sequences.
GPU_MODELS: dict[str, tuple[Callable[[], onnx.ModelProto], int, int]] = {
    "resnet50": (build_resnet50, 64, 0),
    "vit-b16": (build_vit, 32, 0),
    "bert-base": (build_bert, 32, 128),
    "gpt2-small": (build_gpt2, 8, 512),
}


def _latency_ms(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], provider: str, runs: int
) -> tuple[float, list[np.ndarray]]:
    """Median latency with IOBinding (inputs copied to the device once, outputs left there) and the outputs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    providers = [(provider, {"use_tf32": "0"})] if provider == "CUDAExecutionProvider" else [provider]
    if provider == "CUDAExecutionProvider":
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "0")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=providers)
    device = "cuda" if provider == "CUDAExecutionProvider" else "cpu"
    binding = session.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, device, 0))
    for output in session.get_outputs():
        binding.bind_output(output.name, device)
    for _ in range(5):
        session.run_with_iobinding(binding)
    samples = []
    for _ in range(runs):
        binding.synchronize_inputs()
        start = time.perf_counter()
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples), [np.asarray(v, np.float64) for v in binding.copy_outputs_to_cpu()]


def _rel_l2(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(float(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30)) for g, w in zip(got, want, strict=True))


def gpu(smoke_on_cpu: bool) -> dict[str, Any]:
    """Latency/error per model and tool; returns {"skipped": reason} when no CUDA session can be built."""
    from ampconfig.runner.sessions import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is not None and not smoke_on_cpu:
        return {"skipped": reason}
    provider = "CPUExecutionProvider" if smoke_on_cpu else "CUDAExecutionProvider"
    target = "cpu" if smoke_on_cpu else "cuda"
    tools = ("fp32", "ort-float16", "occ", "ampconfig:allow_mix_precision", "ampconfig:force_fp16")
    rng = np.random.default_rng(0)
    results: dict[str, Any] = {"provider": provider}
    for name, (build, batch, seq) in GPU_MODELS.items():
        batch, seq = (1, min(seq, 16)) if smoke_on_cpu else (batch, seq)
        model, feeds = build(), _gpu_feeds(name, batch, seq, rng)
        reference: list[np.ndarray] | None = None
        rows: dict[str, Any] = {}
        for tool in tools:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # occ warns once per clamped weight value
                    converted = model if tool == "fp32" else converter(tool, target)(copy.deepcopy(model))
                median, outputs = _latency_ms(converted, feeds, provider, 3 if smoke_on_cpu else 50)
            except Exception as exc:  # a peer's invalid model is a result, not a benchmark failure
                rows[tool] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
                continue
            reference = outputs if tool == "fp32" else reference
            rows[tool] = {"median_ms": median, "rel_l2": _rel_l2(outputs, reference) if reference else None}
            print(f"  gpu {name} {tool}: {rows[tool]}", file=sys.stderr)
        results[name] = rows
    return results


def gpu_table(results: dict[str, Any]) -> str:
    if "skipped" in results:
        return f"GPU part did not run: {results['skipped']}"
    tools = ("fp32", "ort-float16", "occ", "ampconfig:allow_mix_precision", "ampconfig:force_fp16")
    lines = [
        f"provider: {results['provider']}",
        "",
        "| model | " + " | ".join(tools) + " |",
        "|---|" + "---|" * len(tools),
    ]
    for name, rows in results.items():
        if name == "provider":
            continue
        cells = [
            rows[t]["error"][:60]
            if "error" in rows[t]
            else f"{rows[t]['median_ms']:.2f} ms (rel-L2 {rows[t]['rel_l2']:.1e})"
            for t in tools
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# Large: a > 2 GB model with external data, each tool in its own process (benchmarks/large_model.py).
# --------------------------------------------------------------------------------------------------------------


def large_tools(tools: Sequence[str]) -> list[str]:
    """compare_peers' tools as large_model's: every ``ampconfig:*`` is the one CLI force_fp16 row."""
    mapped = ["ampconfig" if tool.startswith("ampconfig:") else tool for tool in tools]
    return list(dict.fromkeys(mapped))


def large(folder: Path, layers: int, width: int, tools: Sequence[str]) -> dict[str, Any]:
    from large_model import compare_large

    return compare_large(folder, layers, width, large_tools(tools))


def _excerpt(row: dict[str, Any]) -> str:
    if not row.get("error"):
        return ""
    return row["error"][-1].strip().replace("|", "/")[:100]


def large_table(results: dict[str, Any]) -> str:
    model_mb = results["model_bytes"] / 1e6
    lines = [
        f"model: {results['layers']} MatMuls, {results['width']}² float32 weights, {model_mb:,.0f} MB external data",
        "",
        "| tool | exit | wall s | peak RSS MB | peak RSS / model bytes | output valid | error |",
        "|---|---|---|---|---|---|---|",
    ]
    for tool, row in results["tools"].items():
        rss = row.get("peak_rss_mb")
        over = row.get("peak_rss_over_model")
        cells = [
            tool,
            str(row["exit_code"]),
            _fmt_s(row.get("seconds")),
            f"{rss:,.0f}" if rss is not None else "—",
            f"{over:.2f}×" if over is not None else "—",
            "yes" if row["valid"] else "no",
            _excerpt(row),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def large_ratios(results: dict[str, Any]) -> str:
    """Peer / ampconfig for wall time and peak RSS; a peer that failed is timed up to its failure."""
    rows = results["tools"]
    base = rows.get("ampconfig")
    if base is None or not base.get("seconds") or not base.get("peak_rss_mb"):
        return "(no ampconfig row to compare with)"
    lines = ["| peer | wall / ampconfig | peak RSS / ampconfig |", "|---|---|---|"]
    for tool, row in rows.items():
        if tool == "ampconfig":
            continue
        note = "" if row["exit_code"] == 0 else f" (exit {row['exit_code']})"
        wall = f"{row['seconds'] / base['seconds']:.1f}×" if row.get("seconds") is not None else "—"
        rss = f"{row['peak_rss_mb'] / base['peak_rss_mb']:.1f}×" if row.get("peak_rss_mb") is not None else "—"
        lines.append(f"| {tool}{note} | {wall} | {rss} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# End to end: each tool as a user runs it, from one model file to another, in a fresh process.
# --------------------------------------------------------------------------------------------------------------

E2E_TOOLS = ("io-floor", "ampconfig:force_fp16", "ampconfig:allow_mix_precision", "ort-float16", "occ")
#: The I/O floor: a fresh process that only loads and saves the model.
FLOOR_SCRIPT = "import sys, onnx; onnx.save(onnx.load(sys.argv[1]), sys.argv[2])"
#: A peer's own process: load, convert (keep_io_types=True), save.
PEER_SCRIPT = """
import sys, onnx
source, target, tool = sys.argv[1:4]
if tool == "occ":
    from onnxconverter_common import float16
else:
    from onnxruntime.transformers import float16
model = onnx.load(source)
onnx.save(float16.convert_float_to_float16(model, keep_io_types=True), target)
"""


def _file_part(tool: str) -> str:
    """A tool's name as part of a file name (``ampconfig:force_fp16/no-load-check`` holds a slash)."""
    return tool.replace(":", "-").replace("/", "-")


def e2e_command(tool: str, source: Path, target: Path) -> list[str]:
    """The command line of ``tool`` converting ``source`` to ``target``: ampconfig's CLI with its defaults (target
    cuda) but the mode, the peers' and the floor's ``python -c``."""
    from large_model import ampconfig_command

    if tool.startswith("ampconfig:"):
        mode, checked = _ampconfig_mode(tool)
        unchecked = [] if checked else ["--no-load-check"]
        return [*ampconfig_command(), "rewrite", str(source), "-o", str(target), "--precision-mode", mode, *unchecked]
    if tool == "io-floor":
        return [sys.executable, "-c", FLOOR_SCRIPT, str(source), str(target)]
    if tool in ("occ", "ort-float16"):
        return [sys.executable, "-c", PEER_SCRIPT, str(source), str(target), tool]
    raise SystemExit(f"unknown end-to-end tool {tool!r}; tools: {', '.join(E2E_TOOLS)}")


#: ampconfig's other commands on the same file, once each, for their peak memory.
MEMORY_COMMANDS = ("explain", "run")


def _memory_command(command: str, source: Path) -> list[str]:
    from large_model import ampconfig_command

    if command == "explain":
        return [*ampconfig_command(), "explain", str(source), "--precision-mode", "force_fp16", "--json"]
    # The CPU runs both models once (dynamic dimensions at run's defaults: first 1, others 16).
    return [
        *ampconfig_command(),
        *("run", str(source), "--precision-mode", "force_fp16", "--device", "cpu", "--warmup", "0"),
        *("--iterations", "1", "--json"),
    ]


def _user_environment() -> dict[str, str]:
    """The environment a user's shell gives: bytecode caches written and used (a pip install compiles them; a
    development shell with PYTHONDONTWRITEBYTECODE would recompile ampconfig on every run)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _timed(command: list[str], env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """Wall time (perf_counter around the process) and peak RSS (``/usr/bin/time -f %M``, the process's maximum
    resident set: file pages it maps and touches count too)."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            ["/usr/bin/time", "-f", "peak_rss_kib=%M", *command],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "error": f"timed out after {timeout_s:.0f} s"}
    seconds = time.perf_counter() - start
    lines = done.stderr.strip().splitlines()
    rss = next((int(line.split("=", 1)[1]) for line in reversed(lines) if line.startswith("peak_rss_kib=")), None)
    row: dict[str, Any] = {"exit_code": done.returncode, "seconds": seconds, "peak_rss_mb": rss / 1024 if rss else None}
    if done.returncode != 0:
        own = [line for line in lines if not line.startswith(("peak_rss_kib=", "Command exited with non-zero status"))]
        row["error"] = (own[-1] if own else "?")[:200]
    return row


def _output_valid(path: Path) -> str:
    """'yes' when the full checker passes and ONNX Runtime loads the file, else what failed. Loaded without graph
    optimisations: they do not decide validity, and on 100,000-node graphs they ran for more than 15 minutes."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        onnx.checker.check_model(str(path), full_check=True)
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # a peer's invalid output is a result
        return f"no: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ''}"
    return "yes"


def end_to_end(
    models: Sequence[str],
    tools: Sequence[str],
    rounds: int,
    folder: Path,
    timeout_s: float,
    memory_commands: Sequence[str] = MEMORY_COMMANDS,
    partial: Path | None = None,
) -> dict[str, Any]:
    """Each (model, tool) ``rounds`` times, the tools interleaved (one of each per round, the order rotated each
    round) after one untimed round that warms the page cache and the bytecode caches and checks every output;
    then each of ``memory_commands`` once. Models are built once into ``folder`` (kept for the next run)."""
    for tool in tools:
        e2e_command(tool, Path(), Path())  # an unknown tool fails before any model is built
    env = _user_environment()
    import ampconfig

    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(Path(ampconfig.__file__).parent)], env=env, check=False
    )
    folder.mkdir(parents=True, exist_ok=True)
    builders = model_builders()
    results: dict[str, Any] = {"rounds": rounds, "models": {}}
    for name in models:
        source = folder / f"{name}.onnx"
        if not source.is_file():
            onnx.save(builders[name](), str(source))
        nodes = len(onnx.load(str(source), load_external_data=False).graph.node)
        info: dict[str, Any] = {"bytes": source.stat().st_size, "nodes": nodes, "tools": {}, "load": []}
        for tool in tools:
            target = folder / f"{name}.{_file_part(tool)}.out.onnx"
            row = _timed(e2e_command(tool, source, target), env, timeout_s)
            row["valid"] = _output_valid(target) if row.get("exit_code") == 0 else "no output"
            info["tools"][tool] = {"valid": row["valid"], "runs": [], "warm_up": row}
            print(f"  e2e {name} {tool}: warm-up {row.get('seconds', row.get('error'))}", file=sys.stderr)
        for round_ in range(rounds):
            order = list(tools[round_ % len(tools) :]) + list(tools[: round_ % len(tools)])
            info["load"].append(os.getloadavg()[0])
            for tool in order:
                target = folder / f"{name}.{_file_part(tool)}.out.onnx"
                info["tools"][tool]["runs"].append(_timed(e2e_command(tool, source, target), env, timeout_s))
        info["commands"] = {
            command: _timed(_memory_command(command, source), env, timeout_s) for command in memory_commands
        }
        for tool, row in info["tools"].items():
            ok = [run for run in row["runs"] if run.get("exit_code") == 0]
            row["best_s"] = min((run["seconds"] for run in ok), default=None)
            row["peak_rss_mb"] = max((run["peak_rss_mb"] for run in ok if run["peak_rss_mb"]), default=None)
            print(f"  e2e {name} {tool}: best {row['best_s']} s, peak {row['peak_rss_mb']} MB", file=sys.stderr)
        results["models"][name] = info
        if partial is not None:  # what is done survives a run stopped later
            partial.write_text(json.dumps(results, indent=2, default=str))
    return results


def _ratio(numerator: float | None, denominator: float | None) -> str:
    return f"{numerator / denominator:.2f}×" if numerator and denominator else "—"


def e2e_tables(results: dict[str, Any], tools: Sequence[str]) -> str:
    commands = next(iter(results["models"].values()), {}).get("commands", {})
    ampconfig_tools = [t for t in tools if t.startswith("ampconfig:")]
    peers = [t for t in tools if t in ("ort-float16", "occ")]
    columns = ["model", "nodes", "MB", "load avg", *(f"{t} s" for t in tools)]
    columns += [f"{p} / {a.split(':')[1]}" for p in peers for a in ampconfig_tools]
    columns += [f"{a.split(':')[1]} / io-floor" for a in ampconfig_tools] if "io-floor" in tools else []
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for name, info in results["models"].items():
        rows = info["tools"]
        best = {tool: rows[tool]["best_s"] for tool in tools}
        load = info["load"]
        cells = [name, f"{info['nodes']:,}", f"{info['bytes'] / 1e6:.0f}", f"{min(load):.1f}–{max(load):.1f}"]
        cells += [
            _fmt_s(best[t]) if best[t] is not None else (rows[t]["warm_up"].get("error") or "—")[:40] for t in tools
        ]
        cells += [_ratio(best[p], best[a]) for p in peers for a in ampconfig_tools]
        cells += [_ratio(best[a], best["io-floor"]) for a in ampconfig_tools] if "io-floor" in tools else []
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| model | MB | " + " | ".join(f"{t} peak RSS MB (× file)" for t in tools) + " | outputs valid |"]
    lines.append("|" + "---|" * (len(tools) + 3))
    for name, info in results["models"].items():
        model_mb = info["bytes"] / 2**20
        cells = [name, f"{info['bytes'] / 1e6:.0f}"]
        for tool in tools:
            rss = info["tools"][tool]["peak_rss_mb"]
            cells.append(f"{rss:,.0f} ({rss / model_mb:.2f}×)" if rss else "—")
        invalid = [f"{t}: {info['tools'][t]['valid']}" for t in tools if info["tools"][t]["valid"] != "yes"]
        cells.append("all" if not invalid else "; ".join(invalid)[:120])
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| model | MB | " + " | ".join(f"ampconfig {c}: s, peak RSS MB (× file)" for c in commands) + " |",
    ]
    lines.append("|" + "---|" * (len(commands) + 2))
    for name, info in results["models"].items():
        model_mb = info["bytes"] / 2**20
        cells = [name, f"{info['bytes'] / 1e6:.0f}"]
        for command in commands:
            row = info["commands"][command]
            rss = row.get("peak_rss_mb")
            exit_note = "" if row.get("exit_code") == 0 else f" (exit {row.get('exit_code')})"
            cells.append(f"{_fmt_s(row.get('seconds'))}, {rss:,.0f} ({rss / model_mb:.2f}×){exit_note}" if rss else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# Machine description and the command line.
# --------------------------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import onnxruntime

    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "?")
    mem_kib = next((int(line.split()[1]) for line in meminfo if line.startswith("MemTotal")), 0)
    versions = {"python": platform.python_version(), "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}
    for package in ("onnx_ir", "onnxconverter_common", "numpy", "ampconfig"):
        try:
            versions[package] = __import__(package).__version__
        except (ImportError, AttributeError):
            versions[package] = "not installed"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kib / 2**20, 1),
        "date": datetime.date.today().isoformat(),
        "versions": versions,
    }


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default=",".join(DEFAULT_PARTS), help=f"comma-separated: {', '.join(ALL_PARTS)}")
    parser.add_argument("--repeat", type=int, default=3, help="conversions per (model, tool); the median is reported")
    parser.add_argument("--models", default=",".join(model_builders()), help="models for time/memory")
    parser.add_argument("--tools", default=",".join(TOOLS), help="tools to compare")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per (model, tool) subprocess")
    parser.add_argument(
        "--time-rounds", type=int, default=1, help="interleaved rounds of the time part (best of the rounds' medians)"
    )
    parser.add_argument(
        "--checkout-before",
        type=Path,
        help=f"a checkout whose ampconfig the tools named {BEFORE}TOOL run (time part), e.g. a git worktree of main",
    )
    parser.add_argument("--json", dest="json_out", type=Path, help="write every number to this JSON file")
    parser.add_argument("--profile-models", default="bert-base,gpt2-small", help="models the profile part runs")
    parser.add_argument("--gpu-smoke-on-cpu", action="store_true", help="run the GPU part on the CPU EP, batch 1")
    parser.add_argument(
        "--large-folder", type=Path, default=Path("/tmp/ampconfig-large"), help="where the large part builds its model"
    )
    parser.add_argument("--large-layers", type=int, default=10, help="MatMul layers of the large part's model")
    parser.add_argument("--large-width", type=int, default=8192, help="each large-part weight is width x width")
    parser.add_argument("--e2e-models", default=",".join(model_builders()), help="models of the e2e part")
    parser.add_argument("--e2e-tools", default=",".join(E2E_TOOLS), help="tools of the e2e part")
    parser.add_argument("--e2e-rounds", type=int, default=5, help="interleaved rounds of the e2e part (best of)")
    parser.add_argument(
        "--e2e-memory-commands",
        default=",".join(MEMORY_COMMANDS),
        help="ampconfig commands the e2e part runs once per model for peak memory (explain, run; empty: none)",
    )
    parser.add_argument(
        "--e2e-folder", type=Path, default=Path("/tmp/ampconfig-e2e"), help="where the e2e part keeps its models"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["--worker"]:
        print(json.dumps(worker(argv[1], argv[2], int(argv[3]))))
        return 0
    args = parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(ALL_PARTS))
    if unknown:
        raise SystemExit(f"unknown part(s) {unknown}; parts: {', '.join(ALL_PARTS)}")
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    report: dict[str, Any] = {"machine": machine(), "command": " ".join([Path(sys.argv[0]).name, *argv])}
    print(json.dumps(report["machine"], indent=2))
    if "time" in parts or "memory" in parts:
        models = [m.strip() for m in args.models.split(",")]
        results = time_and_memory(models, tools, args.repeat, args.timeout, args.time_rounds, args.checkout_before)
        report["time_memory"] = results
        if "time" in parts:
            ratio = "ratio = peer time / ampconfig allow_mix_precision time"
            print(f"\nConversion time, median of {args.repeat} (seconds; {ratio})")
            print(time_table(results, tools))
            print("\nLinearity (synthetic graphs)\n" + linearity_note(results, tools))
        if "memory" in parts:
            method = next(
                (r["peak_method"] for i in results.values() for r in i["tools"].values() if "peak_method" in r), ""
            )
            print(f"\nPeak memory of one conversion above the loaded model ({method})")
            print(memory_table(results, tools))
    if "validity" in parts:
        reports = validity(tools)
        report["validity"] = {r.tool: {**dict(r.counts), "seconds": r.seconds} for r in reports}
        print("\nValidity on ONNX's node test cases (float32 cases that run in ORT CPU)")
        print(validity_table(reports))
    if "profile" in parts:
        report["profile"] = profile([m for m in args.profile_models.split(",") if m])
        print("\nProfile (cProfile, cumulative)\n" + report["profile"])
    if "gpu" in parts:
        report["gpu"] = gpu(args.gpu_smoke_on_cpu)
        print("\nGPU latency and error\n" + gpu_table(report["gpu"]))
    if "large" in parts:
        report["large"] = large(args.large_folder, args.large_layers, args.large_width, tools)
        print("\nA model with external data, each tool in a fresh process (/usr/bin/time -v)")
        print(large_table(report["large"]))
        print("\nPeer / ampconfig (force_fp16 CLI)\n" + large_ratios(report["large"]))
    if "e2e" in parts:
        e2e_tools = [t.strip() for t in args.e2e_tools.split(",") if t.strip()]
        e2e_models = [m.strip() for m in args.e2e_models.split(",") if m.strip()]
        memory_commands = [c.strip() for c in args.e2e_memory_commands.split(",") if c.strip()]
        partial = args.json_out.with_suffix(".e2e-partial.json") if args.json_out else None
        report["e2e"] = end_to_end(
            e2e_models, e2e_tools, args.e2e_rounds, args.e2e_folder, args.timeout, memory_commands, partial
        )
        print(f"\nEnd to end, file to file, fresh processes: best of {args.e2e_rounds} interleaved rounds")
        print(e2e_tables(report["e2e"], e2e_tools))
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
