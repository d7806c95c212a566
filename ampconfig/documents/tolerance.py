"""The accuracy a rewritten model must hold against the float32 reference: the session config's ``run.tolerance``
section, ``--tolerance``, what ``run``, ``compare`` and ``tune`` judge by, and what a precision lock records."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


# The one tolerance object (ampconfig.prove.verdict judges by it). Its docstring is the schema's description.
class Tolerance(BaseModel):
    """Accuracy the rewritten model must hold against the fp32 reference (else `ampconfig run` exits 1)."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    rel_l2: float = Field(
        default=1e-2,
        gt=0,
        allow_inf_nan=False,
        strict=True,
        description="Largest allowed relative L2 error ||y - y_ref|| / ||y_ref|| of every output (finite, > 0).",
    )
    max_abs: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        strict=True,
        description="Largest allowed absolute error of any element (finite, > 0; unchecked when absent).",
    )
    min_cosine: float | None = Field(
        default=None,
        ge=-1,
        le=1,
        allow_inf_nan=False,
        strict=True,
        description="Smallest allowed cosine similarity between each output and its reference (unchecked when absent).",
    )

    def to_dict(self) -> dict[str, float | None]:
        return {"rel_l2": self.rel_l2, "max_abs": self.max_abs, "min_cosine": self.min_cosine}
