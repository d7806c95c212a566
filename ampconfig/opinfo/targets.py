"""The decision targets, the devices models run on, and their ONNX Runtime providers: plain names, importable
without the op info library (the command line declares its options with them before any library is loaded)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, get_args

from ampconfig.worker.providers import CPU_PROVIDER as CPU_PROVIDER  # re-exported: the targets' providers
from ampconfig.worker.providers import CUDA_PROVIDER as CUDA_PROVIDER

#: A decision target's name, for annotations (settings, op info files, the op info builder).
TargetName = Literal["cpu", "cuda"]
TARGETS: tuple[str, ...] = get_args(TargetName)
#: The decision target wherever none is named (every command, the library API): ampconfig exists to run models in
#: mixed precision on GPUs, and deciding for CUDA needs no GPU.
DEFAULT_TARGET = "cuda"
#: Where models run (``--device``, config ``run.device``) when neither names one: CUDA when a session really gets
#: it, else the CPU. A device is not a target: deciding for CUDA needs no GPU.
AUTO_DEVICE = "auto"
DEVICES: tuple[str, ...] = (AUTO_DEVICE, "cpu", "cuda")
#: The ONNX Runtime execution provider of each target.
PROVIDERS: Mapping[str, str] = {"cpu": CPU_PROVIDER, "cuda": CUDA_PROVIDER}
