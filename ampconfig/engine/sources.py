"""The model a rewrite starts from, in one of two kinds, and everything the one rewrite path asks of it.

- :class:`ProtoSource`: a model file or an ``onnx.ModelProto``, opened as a proto (its path and external data, its
  training information are known; its weights may stay in its file);
- :class:`IrSource`: an ``ir.Model`` handed to :class:`ampconfig.MixedPrecisionPass`, rewritten as it is.

The path (:func:`ampconfig.engine.in_place.rewrite_in_place`) never asks which kind it holds: it asks the source
for the proto its IR version is read from, what a ranges file is checked against, what ONNX Runtime loads when the
checker rejects the input, and how to start again from the admitted input when the checker rejects an output.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import onnx
import onnx_ir as ir

from ampconfig.model_io.ir_bridge import to_proto
from ampconfig.model_io.ir_version import with_ir_version
from ampconfig.model_io.models import OpenedModel, light_proto, light_proto_of_ir, weightless_proto
from ampconfig.model_io.skeleton import ModelSkeleton
from ampconfig.rewrite.pipeline import admit_input, restart_from_copy
from ampconfig.rewrite.steps.run_context import InputAdmission

if TYPE_CHECKING:  # the rare path that hands the input to ONNX Runtime imports the runner's sessions, no other
    from ampconfig.runner.sessions import ModelFile

#: What a ranges file is checked against: a proto of the input, its path, and the weights it holds without bytes.
Identity = tuple[onnx.ModelProto, "str | None", "Mapping[str, ir.TensorProtocol] | None"]
#: How ONNX Runtime takes a model: a proto, or a file it reads the weights beside.
Runnable: TypeAlias = "onnx.ModelProto | ModelFile"


class InputSource(ABC):
    """One rewrite's input: ``model`` (rewritten in place) and ``light``, a light proto of it as handed in (graph,
    types and shapes; the admission repairs a copy of it)."""

    def __init__(self, model: ir.Model, light: onnx.ModelProto) -> None:
        self.model = model
        self.light = light

    @property
    @abstractmethod
    def path(self) -> str | None:
        """The input's file, for located messages (None for a model handed in memory)."""

    @property
    @abstractmethod
    def external_files(self) -> frozenset[Path]:
        """The input's external data files: outputs must not be written over them."""

    @abstractmethod
    def declared(self) -> onnx.ModelProto:
        """The proto the output's IR version is read from (what the input declares and uses)."""

    @abstractmethod
    def identity(self) -> Identity:
        """What a ranges file is checked against (made only when there is one)."""

    @abstractmethod
    def constant_names(self) -> Iterable[str]:
        """The names of the input's constant tensors (a ranges file need not cover them)."""

    @abstractmethod
    def dropped(self) -> list[str]:
        """Warnings about what the rewritten model does not carry over from the input."""

    @abstractmethod
    def for_onnx_runtime(self, admitted: ir.Model, repaired: bool, ir_version: int) -> Runnable:
        """The admitted input as ONNX Runtime takes it, at the output's IR version (the rare path of an input the
        checker rejects: ONNX Runtime judges it, from bytes or from its file)."""

    @abstractmethod
    def restart(self, raise_opset: bool) -> Callable[[], ir.Model]:
        """The admitted input again, for a second attempt when the checker rejects an output. Asked right after the
        admission."""

    @abstractmethod
    def output_for_check(self, skeleton: ModelSkeleton) -> onnx.ModelProto | None:
        """The rewritten model as ONNX Runtime checks it when the input was rejected: a proto, or None to have it
        written to a file first (its tensors stay on disk)."""


class ProtoSource(InputSource):
    """A model opened as a proto (:func:`~ampconfig.model_io.models.open_model`): its proto, path and files are
    known."""

    def __init__(self, opened: OpenedModel) -> None:
        super().__init__(opened.to_ir(), light_proto(opened.proto))
        self.opened = opened

    @property
    def path(self) -> str | None:
        return self.opened.path

    @property
    def external_files(self) -> frozenset[Path]:
        return self.opened.external_files

    def declared(self) -> onnx.ModelProto:
        return self.opened.proto

    def identity(self) -> Identity:
        return self.opened.proto, self.opened.path, None

    def constant_names(self) -> Iterable[str]:
        return (tensor.name for tensor in self.opened.proto.graph.initializer)

    def dropped(self) -> list[str]:
        return _training_info_dropped(self.opened.proto)

    def for_onnx_runtime(self, admitted: ir.Model, repaired: bool, ir_version: int) -> Runnable:
        """A model with tensors on disk is loaded from its file, which ORT reads the weights next to (that file is
        the unrepaired model); a proto the admission did not change is taken as it was opened; otherwise the
        admitted model is serialised with its weights (the one place a rewrite serialises the whole input)."""
        from ampconfig.runner.sessions import ModelFile

        opened = self.opened
        if opened.tensors_on_disk and opened.path:
            return ModelFile(Path(opened.path), opened.proto)
        if not repaired:
            return with_ir_version(opened.proto, ir_version)
        return _serialised(admitted, ir_version)

    def restart(self, raise_opset: bool) -> Callable[[], ir.Model]:
        """The opened proto read into an ``ir.Model`` again and admitted again (the same deterministic steps; ONNX
        Runtime judged the input already). Unlike :class:`IrSource`, which holds only the ``ir.Model`` it was
        handed and so clones it before the steps change it, this source can make the admitted input again from its
        proto when a repair needs it: an up-front clone would cost every call (0.4-0.6 s on a 25k-node graph), to
        serve the rare call whose output the checker rejects."""
        opened = self.opened

        def restart() -> ir.Model:
            model = opened.to_ir()
            admit_input(model, InputAdmission(light_proto(opened.proto)), raise_opset=raise_opset, accept=_judged)
            return model

        return restart

    def output_for_check(self, skeleton: ModelSkeleton) -> onnx.ModelProto | None:
        return None if self.opened.external_files else skeleton.full_proto()


class IrSource(InputSource):
    """An ``ir.Model`` handed in (the onnx-ir pass): no path, no files; its weights are never serialised, but for
    an input the checker rejects."""

    def __init__(self, model: ir.Model) -> None:
        super().__init__(model, light_proto_of_ir(model))

    @property
    def path(self) -> str | None:
        return None

    @property
    def external_files(self) -> frozenset[Path]:
        return frozenset()

    def declared(self) -> onnx.ModelProto:
        return self.light

    def identity(self) -> Identity:
        proto, left_out = weightless_proto(self.model)
        return proto, None, left_out

    def constant_names(self) -> Iterable[str]:
        return (value.name or "" for value in self.model.graph.initializers.values())

    def dropped(self) -> list[str]:
        return []

    def for_onnx_runtime(self, admitted: ir.Model, repaired: bool, ir_version: int) -> Runnable:
        return _serialised(admitted, ir_version)

    def restart(self, raise_opset: bool) -> Callable[[], ir.Model]:
        return restart_from_copy(self.model)

    def output_for_check(self, skeleton: ModelSkeleton) -> onnx.ModelProto | None:
        return skeleton.full_proto()


def _serialised(admitted: ir.Model, ir_version: int) -> onnx.ModelProto:
    proto = to_proto(admitted)
    proto.ir_version = ir_version
    return proto


def _judged(model: ir.Model, admission: InputAdmission) -> None:
    """Nothing to judge: ONNX Runtime accepted this input before the first attempt."""


def _training_info_dropped(proto: onnx.ModelProto) -> list[str]:
    """The warning for a model with training information, which the rewrite does not carry over: its training
    graphs compute and update weights in their stored dtypes, which the rewrite changes."""
    if not proto.training_info:
        return []
    graphs = [
        f"{part} {graph.name!r}" if graph.name else part
        for info in proto.training_info
        for part, graph in (("initialization", info.initialization), ("algorithm", info.algorithm))
        if graph.node or graph.output
    ]
    updated = sorted({binding.key for info in proto.training_info for binding in info.update_binding})
    updates = f", updating {', '.join(updated)}" if updated else ""
    return [
        f"training_info dropped ({len(proto.training_info)} entry(ies): {', '.join(graphs) or 'empty'}{updates}): "
        "the rewritten model is for inference; train the original, then rewrite it"
    ]
