"""What a run found, as plain data: :class:`RunReport` (the report package prints it as tables and JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ampconfig.inputs.feeds import PreparedInput
from ampconfig.prove.accuracy import OutputMetrics, OutputSpread, Tolerance
from ampconfig.rewrite.results import RewriteResult
from ampconfig.runner.timing import Latency

if TYPE_CHECKING:
    from ampconfig.prove.calibration import Calibration


@dataclass
class RunReport:
    model: str
    example: str | None  # bundled example name when no model was given
    precision_mode: str
    mode_source: str  # "--precision-mode", "config <file>" or "default"
    low_dtype: str
    target: str  # the decision target: whose op info decided the dtypes ("cpu" or "cuda")
    device: str  # where it ran: "cpu" or "cuda"
    providers: dict[str, list[str]]  # "reference"/"rewritten" -> session.get_providers()
    tf32: dict[str, bool | None]
    inputs: list[PreparedInput]
    outputs: list[OutputMetrics]
    latency_reference: Latency
    latency_rewritten: Latency
    speedup: float | None
    nodes: int
    low_precision_nodes: int
    dtype_counts: dict[str, int]
    casts: int
    casts_retargeted: int
    values_clamped: int
    tolerance: Tolerance
    failures: list[str]
    output_path: str | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    device_requested: str = "auto"  # --device / run.device: "auto", "cpu" or "cuda"
    rewrite: RewriteResult | None = field(default=None, repr=False, compare=False)  # what ran (run --lock-out)
    calibration: Calibration | None = field(default=None, repr=False, compare=False)  # measured now (--ranges-out)
    samples: int = 1  # samples judged (--data), each output's metrics are its worst sample's
    spreads: list[OutputSpread] = field(default_factory=list)  # each output's error over the samples

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def provider(self) -> str:
        """The provider the rewritten model's session actually got first."""
        return self.providers["rewritten"][0]
