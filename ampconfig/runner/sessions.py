"""ONNX Runtime sessions: which execution provider to use, and sessions that report the one they really got.

Every session lives in the worker process (:mod:`ampconfig.worker.client`): a :class:`Session` here is a handle
to one there, and running or timing it is a request. A native crash of ONNX Runtime while a session is built or
run is :class:`~ampconfig.worker.client.WorkerCrashed`, never the end of this process.

onnxruntime-gpu lists ``CUDAExecutionProvider`` as available even where the CUDA libraries cannot be loaded,
and then silently runs on the CPU. So the CUDA path is decided by building a tiny session and reading
``InferenceSession.get_providers()``, and every real session is checked the same way.

The device (``--device``, config ``run.device``) is where models run; it is not the decision target (``--target``:
whose op info decides the dtypes), which needs no device at all.

- device ``"cpu"``: ``providers=["CPUExecutionProvider"]``, always passed explicitly (so the GPU wheel does
  not try, and fail loudly, to load its CUDA libraries).
- device ``"cuda"``: CUDA or an error that says why; never a silent CPU run.
- device ``None``/``"auto"``: CUDA when a CUDA session can really be built, else the CPU, said in a note.

On CUDA the fp32 reference runs with TF32 off (``use_tf32=0``) and the rewritten model with TF32 as the
config's ``allow_tf32`` says; runs go through IOBinding (inputs as device OrtValues, outputs bound to the
device) so the host copies stay out of the timed loop, and timing happens in the worker, next to the session.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.targets import AUTO_DEVICE, DEVICES
from ampconfig.runner.timing import Latency, ProgressCallback, check_counts, summarize
from ampconfig.worker import client as worker
from ampconfig.worker.channel import large_bytes
from ampconfig.worker.client import Phase, WorkerRefused
from ampconfig.worker.client import WorkerCrashed as WorkerCrashed  # re-exported: what a session may raise
from ampconfig.worker.client import cuda_unavailable_reason as cuda_unavailable_reason  # re-exported: the device
from ampconfig.worker.providers import CPU_PROVIDER as CPU_PROVIDER  # re-exported: where sessions run
from ampconfig.worker.providers import CUDA_PROVIDER

log = logging.getLogger(__name__)

#: How :func:`create_session` reports a model ONNX Runtime refuses, before ORT's own words.
LOAD_FAILED = "ONNX Runtime could not load the model: "


class KernelMissing(AmpconfigError):
    """ONNX Runtime resolved the model's graph (its types and shapes check) but a provider has no kernel for one of
    its nodes (``NOT_IMPLEMENTED`` while loading): the model is valid, and runs where a provider has the kernel."""


#: How :func:`run_once` reports a model ONNX Runtime loaded but could not run on its feeds, before ORT's words.
RUN_FAILED = "ONNX Runtime could not run the model on these inputs: "

#: Protobuf cannot serialise a message of 2 GiB or more: such models reach ONNX Runtime only as files.
PROTOBUF_LIMIT = (1 << 31) - 1


@dataclass(frozen=True)
class ModelFile:
    """A model ONNX Runtime loads from its file (it resolves external data next to the file), with the model's
    proto without its external tensor data, for what callers read from the graph (its inputs' dtypes)."""

    path: Path
    proto: onnx.ModelProto


@dataclass(frozen=True)
class ModelInFolder:
    """A model proto in memory whose external tensors ONNX Runtime reads from ``folder`` (the model's own): a copy
    of a large model with outputs added runs without its weights being read into protobuf or copied."""

    proto: onnx.ModelProto
    folder: Path


ModelSource = onnx.ModelProto | ModelFile | ModelInFolder | bytes | str | Path


@dataclass(frozen=True)
class DeviceChoice:
    """Where the sessions run: ``device`` is "cpu" or "cuda"; ``requested`` is "cpu", "cuda" or "auto"."""

    requested: str
    device: str
    notes: tuple[str, ...] = ()


def normalize_device(device: str | None) -> str:
    """``None``/"auto" -> "auto"; "cpu"/"cuda" (any case) kept; anything else is an error."""
    if device is None:
        return AUTO_DEVICE
    key = str(device).strip().lower()
    if key in DEVICES:
        return key
    raise AmpconfigError(f"unknown device {device!r}", hint="use auto, cpu or cuda")


def choose_device(device: str | None) -> DeviceChoice:
    """Where models run, from the requested device (``--device``/``run.device``; the decision target plays no
    part); an unusable explicit ``cuda`` is an error that says why."""
    requested = normalize_device(device)
    if requested == "cpu":
        choice = DeviceChoice(requested, "cpu")
    elif (reason := cuda_unavailable_reason()) is None:
        choice = DeviceChoice(requested, "cuda")
    elif requested == "cuda":
        raise AmpconfigError(
            f"device cuda was asked for but CUDA cannot be used: {reason}",
            hint="use --device cpu, or --device auto to fall back to the CPU (the decision target, --target, "
            "needs no device)",
        )
    else:
        choice = DeviceChoice(requested, "cpu", (f"CUDA not used ({reason}); running on the CPU",))
    log.info("device: %s (asked for %s)%s", choice.device, choice.requested, "".join(f"; {n}" for n in choice.notes))
    return choice


#: ONNX Runtime's session config entry that turns off its QDQ fusions (DequantizeLinear -> op -> QuantizeLinear
#: into int8 kernels), which only its CPU (and DirectML) provider applies.
DISABLE_QDQ_FUSION = {"session.disable_quant_qdq": "1"}


#: cuDNN's convolution algorithm search for sessions built many times (tune's trials). ORT's CUDA provider
#: defaults to EXHAUSTIVE, which benchmarks every algorithm on a new session's first run of each conv shape.
TRIAL_CONV_ALGO_SEARCH = "HEURISTIC"
CONV_ALGO_SEARCHES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
#: ONNX Runtime's graph optimisation levels, lowest first, by the names :func:`create_session` takes.
OPTIMIZATION_LEVELS = ("disabled", "basic", "extended", "all")


def _payload(model: ModelSource) -> tuple[object, str | None]:
    """What the worker loads (a model's bytes, sent out of band, or a file path) and the folder of its external
    data when it comes as bytes."""
    folder = str(model.folder) if isinstance(model, ModelInFolder) else None
    if isinstance(model, ModelInFolder):
        model = model.proto
    if isinstance(model, onnx.ModelProto):
        size = model.ByteSize()
        if size > PROTOBUF_LIMIT:
            raise AmpconfigError(
                f"the model is too large to hand to ONNX Runtime from memory ({size / (1 << 30):.1f} GiB; protobuf "
                "cannot serialise 2 GiB or more)",
                hint="ampconfig run and ampconfig rewrite handle such models from files with external data",
            )
        return large_bytes(model.SerializeToString()), folder
    if isinstance(model, ModelFile):
        return str(model.path), folder
    if isinstance(model, Path):
        return str(model), folder
    if isinstance(model, bytes):
        return large_bytes(model), folder
    return model, folder


def model_proto(model: onnx.ModelProto | ModelFile | ModelInFolder) -> onnx.ModelProto:
    """The graph proto of an in-memory model or of a model file (for its inputs; tensor data may be absent)."""
    return model.proto if isinstance(model, (ModelFile, ModelInFolder)) else model


class Session:
    """A session in the worker, and what it really runs on. Dropping the last reference frees it there."""

    def __init__(
        self,
        process: worker.WorkerProcess,
        number: int,
        device: str,
        providers: list[str],
        tf32: bool | None,
        output_names: list[str],
        what: str,
    ) -> None:
        self._process = process
        self._number = number
        self.device = device
        self.providers = providers
        self.tf32 = tf32  # None on the CPU, where TF32 does not exist
        self.output_names = output_names
        self.what = what

    @property
    def provider(self) -> str:
        """The first (preferred) provider the session actually got."""
        return self.providers[0]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One run on ``feeds``; ONNX Runtime's refusal is :class:`~ampconfig.worker.client.WorkerRefused`."""
        arrays = {name: np.ascontiguousarray(array) for name, array in feeds.items()}
        answer = self._process.ask("run", {"id": self._number, "feeds": arrays}, Phase.RUN, self.what)
        return answer

    def stats(self, feeds: Mapping[str, np.ndarray], **layout: object) -> dict[str, object]:
        """One run whose values' numbers the worker counts (``worker.server.Worker.stats``; ``layout`` says which
        output carries which value): the arrays stay in the worker, only the numbers come back."""
        arrays = {name: np.ascontiguousarray(array) for name, array in feeds.items()}
        return self._process.ask("stats", {"id": self._number, "feeds": arrays, **layout}, Phase.RUN, self.what)

    def time(
        self,
        feeds: Mapping[str, np.ndarray],
        *,
        warmup: int,
        iterations: int,
        label: str = "timing",
        progress: ProgressCallback | None = None,
    ) -> Latency:
        """Warm-up runs, then timed runs, in the worker next to the session: the time of each run is ONNX Runtime's
        alone, with no message between this process and the worker inside it."""
        check_counts(warmup, iterations)
        arrays = {name: np.ascontiguousarray(array) for name, array in feeds.items()}
        arguments = {"id": self._number, "feeds": arrays, "warmup": warmup, "iterations": iterations, "label": label}
        samples = self._process.ask("time", arguments, Phase.RUN, self.what, progress)
        return summarize(samples, warmup)

    def __del__(self) -> None:
        self._process.release(self._number)


def create_session(
    model: ModelSource,
    device: str,
    *,
    tf32: bool = False,
    conv_algo_search: str | None = None,
    config: Mapping[str, str] | None = None,
    in_node_order: bool = False,
    optimization: str | None = None,
    what: str = "the model",
) -> Session:
    """Build a session on ``device`` ("cpu" or "cuda") in the worker and check it got that device.

    A CUDA session that came back without CUDA raises :class:`AmpconfigError`: ORT would otherwise run it on
    the CPU without saying so. ``conv_algo_search`` (CUDA only) sets cuDNN's convolution algorithm search
    (:data:`TRIAL_CONV_ALGO_SEARCH` for sessions built many times). ``config``: session config entries
    (:data:`DISABLE_QDQ_FUSION`). ``in_node_order``: ONNX Runtime runs ready nodes in the order of the graph (its
    priority-based order) rather than its default, which may run a whole chain before the side branches that read
    it, keeping every value the branches read alive until then. ``optimization``: one of
    :data:`OPTIMIZATION_LEVELS` (None: ONNX Runtime's default, all). ``what`` names the model in a crash message
    ("the fp32 model").
    """
    if conv_algo_search is not None and conv_algo_search not in CONV_ALGO_SEARCHES:
        raise ValueError(f"unknown cudnn_conv_algo_search {conv_algo_search!r}")
    if optimization is not None and optimization not in OPTIMIZATION_LEVELS:
        raise ValueError(f"unknown graph optimisation level {optimization!r}")
    payload, folder = _payload(model)
    arguments = {
        "model": payload,
        "device": device,
        "tf32": tf32,
        "conv_algo_search": conv_algo_search,
        "config": dict(config or {}),
        "in_node_order": in_node_order,
        "folder": folder,
        "optimization": optimization,
    }
    process = worker.current()
    try:
        answer = process.ask("open", arguments, Phase.LOAD, what)
    except WorkerRefused as exc:
        refusal = KernelMissing if exc.kind == "NotImplemented" else AmpconfigError
        raise refusal(f"{LOAD_FAILED}{exc}") from None
    session = Session(
        process,
        answer["id"],
        device,
        list(answer["providers"]),
        tf32 if device == "cuda" else None,
        list(answer["outputs"]),
        what,
    )
    log.info("ONNX Runtime session on %s: providers %s", device, ", ".join(session.providers))
    if device == "cuda" and CUDA_PROVIDER not in session.providers:
        raise AmpconfigError(
            f"asked ONNX Runtime for {CUDA_PROVIDER} but the session got only {', '.join(session.providers)}"
        )
    return session


def run_once(session: Session, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a session once on host arrays and return its outputs by name; ONNX Runtime refusing to run the model on
    these inputs is an input error (out-of-range ids, shapes the model does not take)."""
    try:
        return session.run(feeds)
    except WorkerRefused as exc:
        raise AmpconfigError(
            f"{RUN_FAILED}{first_line(exc)}",
            hint="give real inputs (--inputs FILE.npz, --input NAME=FILE.npy) or the shapes the model takes (--shape)",
        ) from None


def first_line(exc: BaseException) -> str:
    """The first line of an exception's words (ONNX Runtime's messages run on with a stack), or its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
