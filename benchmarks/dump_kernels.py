"""Dump ONNX Runtime's kernel registry (every provider's registered kernels) to JSON, crash-safe.

``onnxruntime.capi.onnxruntime_pybind11_state.get_all_opkernel_def()`` lists, per execution provider, each
registered kernel's op, domain, version range and type constraints. In onnxruntime-gpu 1.31.1 on a machine without
the CUDA libraries it crashes the process (segmentation fault), so the listing runs in a child process and this
script reports a crash instead of dying with it. On a GPU machine, make the CUDA libraries loadable first
(``LD_LIBRARY_PATH``, see ../shared/gpu.md); ``--load-cuda-first`` also builds one CUDA session in the child before
listing, which loads the provider library.

    python benchmarks/dump_kernels.py kernels.json [--providers CUDAExecutionProvider] [--load-cuda-first]
    ampconfig ops-info import-kernels kernels.json --target cuda

Needs only onnxruntime (no ampconfig import), so it runs on a bare GPU machine. The format is the one
``benchmarks/gpu_models.py --op-kernels`` writes: ``{"onnxruntime": VERSION, "kernels": {PROVIDER: [{"op", "domain",
"provider", "since", "until", "types"}]}}``. Exit 0 written, 1 the child crashed or listed nothing, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_PROVIDERS = ("CPUExecutionProvider", "CUDAExecutionProvider")


def _row(kernel: Any) -> dict[str, Any]:
    since, until = kernel.version_range
    return {
        "op": kernel.op_name,
        "domain": kernel.domain or "ai.onnx",
        "provider": kernel.provider,
        "since": since,
        "until": until,
        "types": {name: sorted(types) for name, types in sorted(kernel.type_constraints.items())},
    }


def _load_cuda() -> None:
    """Build one CUDA session so the provider library is loaded before the registry is listed."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "load_cuda",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10  # ORT 1.31 refuses onnx 1.23's default IR version
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    except Exception as exc:  # the listing may still work; say so on stderr
        print(f"dump_kernels: CUDA session failed: {exc}", file=sys.stderr)


def child(out: str, load_cuda_first: bool) -> int:
    """In the child process: list the registry and write the rows."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    if load_cuda_first:
        _load_cuda()
    rows = [_row(kernel) for kernel in state.get_all_opkernel_def()]
    Path(out).write_text(json.dumps(rows, separators=(",", ":")), encoding="utf-8")
    return 0


def _describe(returncode: int) -> str:
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else "?"
        return f"killed by signal {-returncode} ({name})"
    return f"exit status {returncode}"


def dump(output: Path, providers: list[str], load_cuda_first: bool, python: str) -> int:
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="ampconfig-kernels-") as folder:
        rows_file = Path(folder) / "rows.json"
        command = [python, os.path.abspath(__file__), "--child", str(rows_file)]
        if load_cuda_first:
            command.append("--load-cuda-first")
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not rows_file.exists():
            print(
                f"dump_kernels: listing the kernel registry failed in the child process ({_describe(done.returncode)})."
                " onnxruntime-gpu crashes there when the CUDA libraries cannot be loaded: run this on the machine"
                " with them (LD_LIBRARY_PATH), or with the CPU wheel for the CPU provider."
                + (f"\n{done.stderr.strip()[-800:]}" if done.stderr.strip() else ""),
                file=sys.stderr,
            )
            return 1
        rows = json.loads(rows_file.read_text(encoding="utf-8"))
    kernels: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if not providers or row["provider"] in providers:
            kernels.setdefault(row["provider"], []).append(row)
    if not kernels:
        print(f"dump_kernels: no kernels for {', '.join(providers)}", file=sys.stderr)
        return 1
    document = {"onnxruntime": ort.__version__, "kernels": kernels}
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.tmp")
    partial.write_text(json.dumps(document, indent=1), encoding="utf-8")
    os.replace(partial, output)
    counts = ", ".join(f"{provider} {len(found)}" for provider, found in sorted(kernels.items()))
    print(f"dump_kernels: onnxruntime {ort.__version__}: {counts} kernels -> {output}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", nargs="?", type=Path, help="JSON file to write")
    parser.add_argument("--providers", default=",".join(DEFAULT_PROVIDERS), help="comma-separated ('' = all)")
    parser.add_argument("--load-cuda-first", action="store_true", help="build a CUDA session before listing")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the child (another venv)")
    parser.add_argument("--child", metavar="ROWS", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.load_cuda_first)
    if args.output is None:
        parser.print_usage(sys.stderr)
        return 2
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    return dump(args.output, providers, args.load_cuda_first, args.python)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
