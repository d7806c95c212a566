"""ONNX Runtime sessions: which execution provider to use, and sessions that report the one they really got.

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
device) so the host copies stay out of the timed loop.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.library import CPU_PROVIDER, CUDA_PROVIDER
from ampconfig.settings.resolve import AUTO_DEVICE, DEVICES

log = logging.getLogger(__name__)


#: ONNX Runtime's own default severity for its process-wide logger (warning).
_ORT_DEFAULT_LOG_SEVERITY = 2
#: Fatal only: ORT's placement warnings are not the user's business, and a failure reaches the user once, as
#: ampconfig's own located error carrying ORT's words, not first as ORT's raw coloured log line.
SESSION_LOG_SEVERITY = 4

#: How :func:`create_session` reports a model ONNX Runtime refuses, before ORT's own words.
LOAD_FAILED = "ONNX Runtime could not load the model: "
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


#: ONNX Runtime's session option that resolves a model's external data in a folder when the model comes as bytes.
EXTERNAL_DATA_FOLDER = "session.model_external_initializers_file_folder_path"

ModelSource = onnx.ModelProto | ModelFile | ModelInFolder | bytes | str | Path


@dataclass(frozen=True)
class DeviceChoice:
    """Where the sessions run: ``device`` is "cpu" or "cuda"; ``requested`` is "cpu", "cuda" or "auto"."""

    requested: str
    device: str
    notes: tuple[str, ...] = ()


@contextmanager
def _quiet_ort() -> Iterator[None]:
    """Silence ORT's process-wide logger (its CUDA library load errors) while probing."""
    ort.set_default_logger_severity(4)
    try:
        yield
    finally:
        ort.set_default_logger_severity(_ORT_DEFAULT_LOG_SEVERITY)


def normalize_device(device: str | None) -> str:
    """``None``/"auto" -> "auto"; "cpu"/"cuda" (any case) kept; anything else is an error."""
    if device is None:
        return AUTO_DEVICE
    key = str(device).strip().lower()
    if key in DEVICES:
        return key
    raise AmpconfigError(f"unknown device {device!r}", hint="use auto, cpu or cuda")


def _probe_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "cuda_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return model.SerializeToString()


@functools.lru_cache(maxsize=1)
def cuda_unavailable_reason() -> str | None:
    """``None`` when a CUDA session can really be built here, else why not (in words)."""
    if CUDA_PROVIDER not in ort.get_available_providers():
        return f"this onnxruntime build ({ort.get_device()}) has no {CUDA_PROVIDER}"
    options = _session_options()
    try:
        with _quiet_ort():
            session = ort.InferenceSession(_probe_model(), options, providers=[CUDA_PROVIDER, CPU_PROVIDER])
    except Exception as exc:  # ORT raises its own exception types
        return f"creating a CUDA session failed: {exc}"
    if CUDA_PROVIDER not in session.get_providers():
        return (
            f"onnxruntime lists {CUDA_PROVIDER} but could not load it (CUDA 13 / cuDNN 9 libraries missing "
            "or no GPU); the session got only " + ", ".join(session.get_providers())
        )
    return None


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


def _session_options(
    model: ModelSource | None = None, config: Mapping[str, str] | None = None, in_node_order: bool = False
) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.log_severity_level = SESSION_LOG_SEVERITY
    if in_node_order:
        options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    if isinstance(model, ModelInFolder):
        options.add_session_config_entry(EXTERNAL_DATA_FOLDER, str(model.folder))
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    return options


#: ONNX Runtime's session config entry that turns off its QDQ fusions (DequantizeLinear -> op -> QuantizeLinear
#: into int8 kernels), which only its CPU (and DirectML) provider applies.
DISABLE_QDQ_FUSION = {"session.disable_quant_qdq": "1"}


#: cuDNN's convolution algorithm search for sessions built many times (tune's trials). ORT's CUDA provider
#: defaults to EXHAUSTIVE, which benchmarks every algorithm on a new session's first run of each conv shape.
TRIAL_CONV_ALGO_SEARCH = "HEURISTIC"
CONV_ALGO_SEARCHES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")


def provider_list(
    device: str, tf32: bool, conv_algo_search: str | None = None
) -> list[str | tuple[str, dict[str, str]]]:
    """The ``providers`` argument of a session on ``device``; ``conv_algo_search`` None keeps ORT's default."""
    if device == "cuda":
        options = {"use_tf32": "1" if tf32 else "0"}
        if conv_algo_search is not None:
            if conv_algo_search not in CONV_ALGO_SEARCHES:
                raise ValueError(f"unknown cudnn_conv_algo_search {conv_algo_search!r}")
            options["cudnn_conv_algo_search"] = conv_algo_search
        return [(CUDA_PROVIDER, options), CPU_PROVIDER]
    return [CPU_PROVIDER]


def _model_bytes_or_path(model: ModelSource) -> bytes | str:
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
        return model.SerializeToString()
    if isinstance(model, ModelFile):
        return str(model.path)
    if isinstance(model, Path):
        return str(model)
    return model


def model_proto(model: onnx.ModelProto | ModelFile | ModelInFolder) -> onnx.ModelProto:
    """The graph proto of an in-memory model or of a model file (for its inputs; tensor data may be absent)."""
    return model.proto if isinstance(model, (ModelFile, ModelInFolder)) else model


@dataclass
class Session:
    """An ORT session plus what it really runs on."""

    session: ort.InferenceSession
    device: str
    providers: list[str]
    tf32: bool | None  # None on the CPU, where TF32 does not exist
    output_names: list[str] = field(default_factory=list)

    @property
    def provider(self) -> str:
        """The first (preferred) provider the session actually got."""
        return self.providers[0]

    def input_types(self) -> dict[str, str]:
        return {arg.name: arg.type for arg in self.session.get_inputs()}

    def bind(self, feeds: Mapping[str, np.ndarray]) -> BoundRun:
        return BoundRun(self, feeds)


def create_session(
    model: ModelSource,
    device: str,
    *,
    tf32: bool = False,
    conv_algo_search: str | None = None,
    config: Mapping[str, str] | None = None,
    in_node_order: bool = False,
) -> Session:
    """Build a session on ``device`` ("cpu" or "cuda") and check it got that device.

    A CUDA session that came back without CUDA raises :class:`AmpconfigError`: ORT would otherwise run it on
    the CPU without saying so. ``conv_algo_search`` (CUDA only) sets cuDNN's convolution algorithm search
    (:data:`TRIAL_CONV_ALGO_SEARCH` for sessions built many times). ``config``: session config entries
    (:data:`DISABLE_QDQ_FUSION`). ``in_node_order``: ONNX Runtime runs ready nodes in the order of the graph (its
    priority-based order) rather than its default, which may run a whole chain before the side branches that read
    it, keeping every value the branches read alive until then.
    """
    providers = provider_list(device, tf32, conv_algo_search)
    options = _session_options(model, config, in_node_order)
    try:
        with _quiet_ort():
            session = ort.InferenceSession(_model_bytes_or_path(model), options, providers=providers)
    except AmpconfigError:
        raise
    except Exception as exc:
        raise AmpconfigError(f"{LOAD_FAILED}{exc}") from None
    active: list[str] = list(session.get_providers())
    log.info("ONNX Runtime session on %s: providers %s", device, ", ".join(active))
    if device == "cuda" and CUDA_PROVIDER not in active:
        raise AmpconfigError(f"asked ONNX Runtime for {CUDA_PROVIDER} but the session got only {', '.join(active)}")
    return Session(
        session=session,
        device=device,
        providers=active,
        tf32=tf32 if device == "cuda" else None,
        output_names=[arg.name for arg in session.get_outputs()],
    )


def feed(array: np.ndarray) -> np.ndarray | ort.OrtValue:
    """``array`` as ONNX Runtime's Python API takes it: as it is, or, for a bfloat16 array (ml_dtypes), an OrtValue
    over its bits, since ORT's numpy bridge refuses it. The OrtValue does not copy: the C-contiguous ``array`` must
    outlive it."""
    if array.dtype != ml_dtypes.bfloat16:
        return array
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), TensorProto.BFLOAT16)


class BoundRun:
    """One model with its inputs bound: calling it runs the model once; :meth:`outputs` fetches the results.

    On CUDA the inputs live on the device and the outputs are bound to the device (IOBinding), so a call times
    the model and not the host copies; on the CPU it is a plain ``session.run``. A model with a bfloat16 output
    has its outputs bound to host memory on either device: numpy has no bfloat16, so ORT's Python API cannot hand
    one back, and it is read from the OrtValue's memory instead (:func:`_host_array`).
    """

    def __init__(self, session: Session, feeds: Mapping[str, np.ndarray]) -> None:
        self._session = session
        self._arrays = {name: np.ascontiguousarray(array) for name, array in feeds.items()}  # kept alive: see feed
        self._feeds = {name: feed(array) for name, array in self._arrays.items()}
        self._last: list[np.ndarray] | None = None
        self._ran = False
        self._binding: ort.IOBinding | None = None
        self._bound_inputs: list[ort.OrtValue] = []
        outputs = session.session.get_outputs()
        self._bfloat16_outputs = any(arg.type == "tensor(bfloat16)" for arg in outputs)
        if session.device == "cuda" or self._bfloat16_outputs:
            self._bind()

    def _bind(self) -> None:
        binding = self._session.session.io_binding()
        device = self._session.device
        for name, array in self._arrays.items():
            value = self._feeds[name]
            if isinstance(value, np.ndarray):
                value = ort.OrtValue.ortvalue_from_numpy(array, device, 0)
            # else a bfloat16 host value (ORT makes no device copy of one from numpy): ORT copies it to the device
            self._bound_inputs.append(value)  # keep the buffers alive
            binding.bind_ortvalue_input(name, value)
        for name in self._session.output_names:
            binding.bind_output(name, "cpu" if self._bfloat16_outputs else device, 0)
        self._binding = binding

    def __call__(self) -> None:
        if self._binding is not None:
            self._session.session.run_with_iobinding(self._binding)
            self._binding.synchronize_outputs()
        else:
            self._last = self._session.session.run(None, self._feeds)
        self._ran = True

    def outputs(self) -> dict[str, np.ndarray]:
        """Run once if nothing ran yet, then return the outputs of the last run as host arrays by name."""
        if not self._ran:
            self()
        if self._binding is None:
            values = self._last or []
        elif self._bfloat16_outputs:
            values = [_host_array(value) for value in self._binding.get_outputs()]
        else:
            values = self._binding.copy_outputs_to_cpu()
        return dict(zip(self._session.output_names, values, strict=True))


def _host_array(value: ort.OrtValue) -> np.ndarray:
    """A host OrtValue as a numpy array (copied); a bfloat16 one through its memory, as ml_dtypes' bfloat16."""
    if value.data_type() != "tensor(bfloat16)":
        return value.numpy()
    shape = tuple(value.shape())
    count = math.prod(shape)
    if count == 0:
        return np.empty(shape, ml_dtypes.bfloat16)
    bits = (ctypes.c_uint16 * count).from_address(value.data_ptr())
    return np.frombuffer(bits, np.uint16).copy().view(ml_dtypes.bfloat16).reshape(shape)


def run_once(session: Session, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a session once on host arrays and return its outputs by name; ONNX Runtime refusing to run the model on
    these inputs is an input error (out-of-range ids, shapes the model does not take)."""
    try:
        return session.bind(feeds).outputs()
    except AmpconfigError:
        raise
    except Exception as exc:  # ORT raises its own exception types (InvalidArgument, Fail, RuntimeException...)
        raise AmpconfigError(
            f"{RUN_FAILED}{str(exc).strip().splitlines()[0]}",
            hint="give real inputs (--inputs FILE.npz, --input NAME=FILE.npy) or the shapes the model takes (--shape)",
        ) from None
