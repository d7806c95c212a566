"""How much memory the inputs of a run may take, checked before they are generated or read.

A shape such as ``--shape x=100000000x64`` asks for tens of GiB; numpy would try to allocate it and fail with a
MemoryError (or the machine would start swapping). Inputs are limited to :data:`INPUT_MEMORY_FRACTION` of the
memory available when the run starts: the models, their intermediate tensors and ONNX Runtime need the rest.
"""

from __future__ import annotations

import os
from pathlib import Path

from ampconfig.errors import AmpconfigError

#: The share of available memory that a run's inputs may take.
INPUT_MEMORY_FRACTION = 0.25
#: Assumed available memory where the system does not say (neither /proc/meminfo nor sysconf).
FALLBACK_AVAILABLE_BYTES = 8 << 30


def _meminfo_available() -> int | None:
    try:
        text = Path("/proc/meminfo").read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def _cgroup_available() -> int | None:
    """What a cgroup v2 memory limit (a container's) leaves, when one is set."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text(encoding="ascii").strip()
        current = int(Path("/sys/fs/cgroup/memory.current").read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None
    if limit == "max" or not limit.isdigit():
        return None
    return max(int(limit) - current, 0)


def _sysconf_available() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def available_memory() -> int:
    """Bytes of memory available to this process now (the smallest of what the system and a cgroup say)."""
    known = [value for value in (_meminfo_available() or _sysconf_available(), _cgroup_available()) if value]
    return min(known) if known else FALLBACK_AVAILABLE_BYTES


def input_memory_budget(available: int | None = None) -> int:
    return int((available_memory() if available is None else available) * INPUT_MEMORY_FRACTION)


def format_bytes(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def check_input_memory(needed: int, what: str, hint: str) -> None:
    """Refuse ``needed`` bytes for inputs above the budget, before anything is allocated."""
    available = available_memory()
    budget = input_memory_budget(available)
    if needed <= budget:
        return
    raise AmpconfigError(
        f"{what} needs {format_bytes(needed)}; inputs may take at most {format_bytes(budget)} "
        f"({INPUT_MEMORY_FRACTION:.0%} of the {format_bytes(available)} of memory available)",
        hint=hint,
    )
