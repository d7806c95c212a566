"""GPU benchmark on real exported models: fp32, TF32, ONNX Runtime's and onnxconverter-common's float16 converters
and ampconfig's precision modes, timed in ONNX Runtime's CUDA provider with IOBinding.

Run by hand on a machine with a GPU (never by the test suite). It needs torch (with torchvision) and transformers
for the exports, onnxruntime-gpu for the sessions, and optionally onnxconverter-common; none of them is a
dependency of ampconfig. Weights are random (no model hub): fine for speed and for the error relative to fp32.

Models (--models, comma-separated; shapes are fixed in the exported graph and fed exactly):
  resnet50    torchvision resnet50, legacy TorchScript exporter (dynamo=False), opset 17.
              images float32 [64, 3, 224, 224] -> logits [64, 1000]
  vit_b_16    torchvision vit_b_16, dynamo exporter; its zero-initialised head gets random weights (else every
              output would be the bias). images float32 [32, 3, 224, 224] -> logits [32, 1000]
  bert_base   transformers BertModel(BertConfig()), dynamo exporter.
              input_ids, attention_mask int64 [32, 128] -> last_hidden_state [32, 128, 768], pooler_output [32, 768]
  gpt2        transformers GPT2Model(GPT2Config(use_cache=False)), dynamo exporter.
              input_ids int64 [8, 512] -> last_hidden_state [8, 512, 768]
  minilm_l6   sentence embedding, the all-MiniLM-L6-v2 shape: BertModel(hidden 384, 6 layers, 12 heads, ffn 1536)
              + masked mean pooling + L2 normalisation, dynamo exporter. input_ids, attention_mask int64 [64, 128]
              -> sentence_embedding [64, 384], last_hidden_state [64, 128, 384]
  bert_fused  BERT through onnxruntime.transformers.optimizer.optimize_model(model_type="bert", num_heads=12,
              hidden_size=768, use_gpu=True): com.microsoft Attention / SkipLayerNormalization / BiasGelu.
              opt_level 0 and 1 are both tried on bert_base's dynamo export; ORT fuses no Attention there (its
              patterns are the TorchScript exporter's), so --fused-source auto then exports the same weights with
              the legacy exporter (opset 17, eager attention) and optimizes that. The (source, opt_level) with the
              most fused ops is kept; every attempt is recorded in the export notes. Same inputs as bert_base.
Attention masks have one full row and the others padded (random lengths in [seq/2, seq]), so the masking path is
measured too. Exports are cached in --work (NAME.onnx + NAME.meta.json; written atomically) and reused.

Variants (--variants, comma-separated; default: all of the first nine):
  fp32                 the export itself; CUDA EP with use_tf32=0. The accuracy reference (cached in --work).
  fp32_tf32            the export, use_tf32=1 (the baseline users get from PyTorch-like defaults).
  ort_fp16             onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True): all fp16.
  ort_amp              the same with op_block_list = its default + ORT_AMP_BLOCK (LayerNorm, Softmax, reductions,
                       Pow, Sqrt, Erf, Exp): ORT's hand-made mixed precision.
  occ_fp16             onnxconverter_common.float16.convert_float_to_float16(keep_io_types=True) (skipped with a
                       note when onnxconverter-common is not installed).
  amp_force_fp16, amp_allow_mix_precision, amp_allow_fp32_to_fp16, amp_allow_mix_precision_bf16
                       ampconfig.rewrite_model_detailed(model_path, precision_mode=MODE, target=--target).
                       Any other amp_MODE is passed through to ampconfig as MODE.
  amp_mixlist:PATH     allow_mix_precision (or --mixlist-mode) with modify_mixlist=PATH; recorded as mix_STEM.
  --mixlist NAME=PATH  the same, recorded as mix_NAME (repeatable; added to --variants).

Per (model, variant) the JSON records: convert_s (load from the saved file + convert, for every tool), the
checker verdict (onnx.checker.check_model(full_check=True)), node / Cast counts and nodes by output dtype, session
creation time, session.get_providers() (a CUDA run whose session did not get the CUDA provider is an error),
latency with IOBinding (inputs are OrtValues on the device, outputs bound to the device; --warmup runs, then median
and min of --runs), and per output the relative L2 error, max abs error and non-finite count against the fp32
reference (float64 on the CPU; top-1 agreement for logits). Every exception is recorded for its (model, variant)
and the run goes on. The JSON is rewritten (atomically) after every export and every variant, so a timeout loses
nothing; an existing --json file is merged into, so several calls can share one file.

Examples:
  # on the GPU machine (after `. benchmarks/gpu_env.sh`; see benchmarks/GPU.md), a few models per call within the
  # device tool's 600 s limit:
  python3 benchmarks/gpu_models.py --work /root/gw --models bert_base,bert_fused --json $OUT/gpu-b.json \\
      --budget-s 540 2>&1 | grep --line-buffered -v -e '^\\[torch.onnx\\]' -e Warning
  python3 benchmarks/gpu_models.py --table a.json b.json      # markdown table for docs/benchmarks.md
  python3 benchmarks/gpu_models.py --op-kernels $OUT/kernels.json   # ORT kernel/contrib-schema dumps
  python3 benchmarks/gpu_models.py --smoke --work /tmp/smoke --json /tmp/smoke.json   # tiny models, CPU, no GPU

--smoke builds tiny configs (2-layer BERT / GPT-2 / MiniLM with small widths, torchvision resnet18 at 64x64 and a
2-layer ViT at 32x32, batch 2-4) and runs on CPUExecutionProvider with 2 warm-up and 5 timed runs: it tests the
whole pipeline without a GPU. When torchvision cannot be imported (a CUDA torchvision beside a CPU torch), the smoke
run uses small stand-in ResNet / ViT modules defined here and says so in the export record.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import gc
import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

STARTED = time.monotonic()

MODELS = ("resnet50", "vit_b_16", "bert_base", "gpt2", "minilm_l6", "bert_fused")
AMP_MODES = ("force_fp16", "allow_mix_precision", "allow_fp32_to_fp16", "allow_mix_precision_bf16")
DEFAULT_VARIANTS = ("fp32", "fp32_tf32", "ort_fp16", "ort_amp", "occ_fp16", *(f"amp_{m}" for m in AMP_MODES))
#: Ops ORT's converter keeps float32 in the ort_amp variant (on top of its DEFAULT_OP_BLOCK_LIST): the usual
#: "numerically sensitive" set that PyTorch autocast also runs in float32.
ORT_AMP_BLOCK = ("LayerNormalization", "Softmax", "ReduceMean", "ReduceSum", "Pow", "Sqrt", "Erf", "Exp")
#: ONNX Runtime 1.31 loads IR versions <= 13; onnx 1.23 stamps 14 on models it makes. 10 covers opsets <= 22.
MAX_IR_VERSION = 10
LEGACY_OPSET = 17
FUSED_OPS = ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "EmbedLayerNormalization", "BiasGelu")
FUSED_OPS_MORE = ("FastGelu", "Gelu", "BiasSplitGelu", "SkipSimplifiedLayerNormalization", "BiasAdd")

#: Seconds per step on an H100 machine (export from cold; one variant including conversion, checker, session
#: creation and the timed runs); the budget uses them until the run has measured its own.
EXPORT_ESTIMATE_S = {"resnet50": 25, "vit_b_16": 60, "bert_base": 60, "gpt2": 75, "minilm_l6": 35, "bert_fused": 45}
VARIANT_ESTIMATE_S = {"resnet50": 15, "vit_b_16": 20, "bert_base": 20, "gpt2": 25, "minilm_l6": 10, "bert_fused": 20}
SMOKE_ESTIMATE_S = 5.0


def log(message: str) -> None:
    """One progress line, flushed at once: the device tool only returns what reached stdout before a timeout."""
    print(f"[{time.monotonic() - STARTED:7.1f}s] {message}", flush=True)


# --------------------------------------------------------------------------------------------------------------
# Model configurations and feeds
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformerShape:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    positions: int


@dataclass(frozen=True)
class ModelConfig:
    """What one export is: the model, its fixed input shapes and the exporter. ``key`` names its cache files."""

    name: str
    smoke: bool
    exporter: str  # "legacy", "dynamo" or "ort_optimizer"
    batch: int
    seq: int = 0  # token models
    image: int = 0  # image models (square)
    transformer: TransformerShape | None = None
    base: str | None = None  # bert_fused is made from bert_base's export
    attn: str | None = None  # transformers attn_implementation; None: the library's default (sdpa)
    resized: str = ""  # "-b8-s64" when --batch/--seq changed the default shapes

    @property
    def key(self) -> str:
        return f"{self.name}{'-smoke' if self.smoke else ''}{self.resized}"

    def input_shapes(self) -> dict[str, list[int]]:
        if self.image:
            return {"images": [self.batch, 3, self.image, self.image]}
        if self.name == "gpt2":
            return {"input_ids": [self.batch, self.seq]}
        return {"input_ids": [self.batch, self.seq], "attention_mask": [self.batch, self.seq]}

    def output_names(self) -> list[str]:
        if self.image:
            return ["logits"]
        if self.name == "gpt2":
            return ["last_hidden_state"]
        if self.name == "minilm_l6":
            return ["sentence_embedding", "last_hidden_state"]
        return ["last_hidden_state", "pooler_output"]

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {"exporter": self.exporter, "inputs": self.input_shapes()}
        if self.transformer is not None:
            described["transformer"] = self.transformer.__dict__
        if self.base:
            described["base"] = self.base
        if self.attn:
            described["attn"] = self.attn
        return described


BERT_BASE = TransformerShape(hidden=768, layers=12, heads=12, ffn=3072, vocab=30522, positions=512)
GPT2_SMALL = TransformerShape(hidden=768, layers=12, heads=12, ffn=3072, vocab=50257, positions=1024)
MINILM_L6 = TransformerShape(hidden=384, layers=6, heads=12, ffn=1536, vocab=30522, positions=512)
SMOKE_BERT = TransformerShape(hidden=64, layers=2, heads=4, ffn=128, vocab=1000, positions=128)
SMOKE_GPT2 = TransformerShape(hidden=64, layers=2, heads=4, ffn=256, vocab=1000, positions=128)
SMOKE_MINILM = TransformerShape(hidden=48, layers=2, heads=4, ffn=96, vocab=1000, positions=128)


def model_config(name: str, smoke: bool, batch: int | None = None, seq: int | None = None) -> ModelConfig:
    """The configuration of ``name``; ``batch``/``seq`` override the documented shapes (a quick CPU check of the
    full-size weights, or a sweep) and then name their own cache files."""
    config = _default_config(name, smoke)
    changes: dict[str, Any] = {}
    if batch and batch != config.batch:
        changes["batch"] = batch
    if seq and config.seq and seq != config.seq:
        changes["seq"] = seq
    if not changes:
        return config
    resized = "".join(f"-{k[0]}{v}" for k, v in changes.items())
    return dataclasses.replace(config, resized=resized, **changes)


def _default_config(name: str, smoke: bool) -> ModelConfig:
    if name == "resnet50":
        return ModelConfig(name, smoke, "legacy", batch=2 if smoke else 64, image=64 if smoke else 224)
    if name == "vit_b_16":
        return ModelConfig(name, smoke, "dynamo", batch=2 if smoke else 32, image=32 if smoke else 224)
    if name == "bert_base":
        shape = SMOKE_BERT if smoke else BERT_BASE
        return ModelConfig(name, smoke, "dynamo", batch=2 if smoke else 32, seq=16 if smoke else 128, transformer=shape)
    if name == "gpt2":
        shape = SMOKE_GPT2 if smoke else GPT2_SMALL
        return ModelConfig(name, smoke, "dynamo", batch=2 if smoke else 8, seq=32 if smoke else 512, transformer=shape)
    if name == "minilm_l6":
        shape = SMOKE_MINILM if smoke else MINILM_L6
        return ModelConfig(name, smoke, "dynamo", batch=4 if smoke else 64, seq=16 if smoke else 128, transformer=shape)
    if name == "bert_fused":
        base = _default_config("bert_base", smoke)
        return ModelConfig(
            name, smoke, "ort_optimizer", base.batch, seq=base.seq, transformer=base.transformer, base="bert_base"
        )
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def make_feeds(config: ModelConfig, seed: int) -> dict[str, np.ndarray]:
    """Deterministic inputs (same seed, same arrays on every call), so a cached reference stays valid."""
    # bert_fused gets bert_base's inputs: the same weights, so the two rows are comparable
    rng = np.random.default_rng([seed, sum((config.base or config.name).encode())])
    shapes = config.input_shapes()
    if config.image:
        return {"images": rng.standard_normal(shapes["images"], dtype=np.float32)}
    assert config.transformer is not None
    batch, seq = config.batch, config.seq
    feeds = {"input_ids": rng.integers(0, config.transformer.vocab, (batch, seq), dtype=np.int64)}
    if "attention_mask" in shapes:
        lengths = rng.integers(seq // 2, seq + 1, batch)
        lengths[0] = seq  # one unpadded row
        feeds["attention_mask"] = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    return feeds


def feeds_digest(feeds: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(feeds):
        digest.update(name.encode())
        digest.update(str(feeds[name].shape).encode())
        digest.update(np.ascontiguousarray(feeds[name]).tobytes())
    return digest.hexdigest()[:16]


# --------------------------------------------------------------------------------------------------------------
# Exports (torch, torchvision and transformers are imported here only: the rest runs without them)
# --------------------------------------------------------------------------------------------------------------


def _torchvision_models() -> tuple[Any | None, str | None]:
    """torchvision.models, or why it cannot be imported (a CUDA build beside a CPU torch fails on import)."""
    try:
        import torchvision.models as tv_models
    except Exception as exc:  # ImportError, or RuntimeError from its C++ ops registering
        return None, f"{type(exc).__name__}: {str(exc)[:200]}"
    return tv_models, None


def _standin_vision(name: str, classes: int) -> Any:
    """Small ResNet / ViT for the smoke run when torchvision is missing: the same op mix (Conv + BatchNorm + ReLU +
    residual Add + pooling + Gemm; patch Conv + class token + pre-norm encoder with GELU + Gemm head)."""
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, channels: int, mid: int, stride: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(channels, mid, 1, bias=False),
                nn.BatchNorm2d(mid),
                nn.ReLU(),
                nn.Conv2d(mid, mid, 3, stride, 1, bias=False),
                nn.BatchNorm2d(mid),
                nn.ReLU(),
                nn.Conv2d(mid, channels, 1, bias=False),
                nn.BatchNorm2d(channels),
            )
            self.skip = nn.Identity() if stride == 1 else nn.AvgPool2d(stride)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.body(x) + self.skip(x))

    class SmallResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 7, 2, 3, bias=False), nn.BatchNorm2d(32), nn.ReLU())
            self.pool = nn.MaxPool2d(3, 2, 1)
            self.blocks = nn.Sequential(Bottleneck(32, 16, 1), Bottleneck(32, 16, 2))
            self.fc = nn.Linear(32, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.blocks(self.pool(self.stem(x)))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    class SmallViT(nn.Module):
        def __init__(self, image: int = 32, patch: int = 8, dim: int = 32) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, dim, patch, patch)
            self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
            layer = nn.TransformerEncoderLayer(dim, 2, 2 * dim, 0.0, "gelu", batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            tokens = self.patch(x).flatten(2).transpose(1, 2)
            tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1) + self.pos
            return self.head(self.norm(self.encoder(tokens))[:, 0])

    return SmallResNet() if name == "resnet50" else SmallViT()


def _vision_module(config: ModelConfig) -> tuple[Any, dict[str, Any]]:
    from torch import nn

    notes: dict[str, Any] = {}
    tv_models, why = _torchvision_models()
    if tv_models is None:
        if not config.smoke:
            raise RuntimeError(f"torchvision is needed for {config.name}: {why}")
        notes["builder"] = f"stand-in module (torchvision unavailable: {why})"
        return _standin_vision(config.name, 10), notes
    if config.name == "resnet50":
        if config.smoke:
            notes["builder"] = "torchvision resnet18(num_classes=10)"
            return tv_models.resnet18(num_classes=10), notes
        notes["builder"] = "torchvision resnet50()"
        return tv_models.resnet50(), notes
    if config.smoke:
        model = tv_models.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
        )
        notes["builder"] = "torchvision VisionTransformer(32px, patch 8, 2 layers, dim 32)"
    else:
        model = tv_models.vit_b_16()
        notes["builder"] = "torchvision vit_b_16()"
    # torchvision zero-initialises the classification head: with it every logit equals the (zero) bias.
    nn.init.normal_(model.heads.head.weight, std=0.02)
    nn.init.normal_(model.heads.head.bias, std=0.02)
    notes["head"] = "random normal(0, 0.02) weights and bias (torchvision zero-initialises it)"
    return model, notes


def _transformer_module(config: ModelConfig) -> tuple[Any, dict[str, Any]]:
    import torch
    from torch import nn
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

    shape = config.transformer
    assert shape is not None
    if config.name == "gpt2":
        gpt_config = GPT2Config(
            n_embd=shape.hidden,
            n_layer=shape.layers,
            n_head=shape.heads,
            n_inner=shape.ffn,
            vocab_size=shape.vocab,
            n_positions=shape.positions,
            use_cache=False,
        )
        gpt = GPT2Model(gpt_config)

        class LastHidden(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = gpt

            def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
                return self.model(input_ids=input_ids).last_hidden_state

        return LastHidden(), {"builder": "transformers GPT2Model", "attn": gpt_config._attn_implementation}

    bert_config = BertConfig(
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        intermediate_size=shape.ffn,
        vocab_size=shape.vocab,
        max_position_embeddings=shape.positions,
        **({"attn_implementation": config.attn} if config.attn else {}),
    )
    bert = BertModel(bert_config)
    notes = {"builder": "transformers BertModel", "attn": bert_config._attn_implementation}

    if config.name == "minilm_l6":

        class SentenceEmbedding(nn.Module):
            """sentence-transformers' all-MiniLM-L6-v2 head: masked mean pooling, then L2 normalisation."""

            def __init__(self) -> None:
                super().__init__()
                self.model = bert

            def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[Any, Any]:
                hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                return nn.functional.normalize(pooled, p=2.0, dim=1), hidden

        notes["head"] = "masked mean pooling + L2 normalise (sentence-transformers)"
        return SentenceEmbedding(), notes

    class BertOutputs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[Any, Any]:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    return BertOutputs(), notes


def _fix_ir_version(model: onnx.ModelProto) -> None:
    """Stamp an IR version ONNX Runtime 1.31 reads (<= 13), never below what the model's opsets need."""
    needed = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    model.ir_version = max(min(model.ir_version, MAX_IR_VERSION), needed)


def _save_atomic(model: onnx.ModelProto, path: Path) -> None:
    """Weights inside the file (all these models are < 2 GB); written beside and renamed so that a timeout never
    leaves a truncated model for the next call to reuse."""
    tmp = path.with_name(path.name + ".partial")
    onnx.save_model(model, str(tmp), save_as_external_data=False)
    os.replace(tmp, path)


def _export_torch(config: ModelConfig, feeds: dict[str, np.ndarray], path: Path, args: argparse.Namespace) -> dict:
    import torch

    torch.manual_seed(args.seed)
    if config.image:
        module, notes = _vision_module(config)
    else:
        module, notes = _transformer_module(config)
    module.eval()
    inputs = tuple(torch.from_numpy(feeds[name]) for name in config.input_shapes())
    tmp = path.with_name(path.name + ".export")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer warnings, once per model
        if config.exporter == "legacy":
            torch.onnx.export(
                module,
                inputs,
                str(tmp),
                dynamo=False,
                opset_version=LEGACY_OPSET,
                input_names=list(config.input_shapes()),
                output_names=config.output_names(),
                do_constant_folding=True,
            )
        else:
            program = torch.onnx.export(
                module,
                inputs,
                dynamo=True,
                opset_version=args.dynamo_opset,
                input_names=list(config.input_shapes()),
                output_names=config.output_names(),
                optimize=True,
            )
            assert program is not None
            program.save(str(tmp), external_data=False)
    model = onnx.load(str(tmp))
    tmp.unlink()
    _fix_ir_version(model)
    _save_atomic(model, path)
    notes["torch"] = torch.__version__
    return notes


def _optimize_bert(source: Path, config: ModelConfig, args: argparse.Namespace, label: str, tried: dict) -> list:
    """optimize_model at opt_level 0 and 1: [(score, opt_level, label, OnnxModel)] for the levels that worked."""
    from onnxruntime.transformers.optimizer import optimize_model

    shape = config.transformer
    assert shape is not None
    results = []
    for opt_level in (0, 1):
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                optimized = optimize_model(
                    str(source),
                    model_type="bert",
                    num_heads=shape.heads,
                    hidden_size=shape.hidden,
                    opt_level=opt_level,
                    use_gpu=args.provider == "cuda",
                )
        except Exception as exc:
            tried[f"{label} opt_level {opt_level}"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            continue
        counts = Counter(node.op_type for node in optimized.model.graph.node if node.domain == "com.microsoft")
        tried[f"{label} opt_level {opt_level}"] = {
            "nodes": len(optimized.model.graph.node),
            "contrib_ops": dict(counts),
            "seconds": round(time.perf_counter() - start, 2),
        }
        attention = counts["Attention"] + counts["MultiHeadAttention"]
        results.append(
            ((attention, sum(counts[op] for op in FUSED_OPS + FUSED_OPS_MORE), -opt_level), opt_level, label, optimized)
        )
    return results


def _fuse_bert(config: ModelConfig, base_path: Path | None, path: Path, args: argparse.Namespace) -> dict:
    """ORT's transformer optimizer on a BERT export; keeps the (source, opt_level) that fused the most.

    Sources: the dynamo export of bert_base, and a legacy (TorchScript, opset 17) export of the same weights with
    eager attention. ORT's attention fusion matches the legacy exporter's patterns; on dynamo exports (transformers
    5, torch 2.13 here) it fuses SkipLayerNormalization and BiasGelu but no Attention, so "auto" falls back to the
    legacy source when the dynamo one gives no Attention node."""
    tried: dict[str, Any] = {}
    candidates: list = []
    if base_path is not None and args.fused_source in ("auto", "dynamo"):
        candidates += _optimize_bert(base_path, config, args, "dynamo bert_base export", tried)
    if args.fused_source == "legacy" or (args.fused_source == "auto" and not any(c[0][0] for c in candidates)):
        # bert_base's name and shapes: the same seed gives the same weights and inputs
        legacy = dataclasses.replace(config, name="bert_base", exporter="legacy", attn="eager", base=None)
        source = path.with_name(f"{config.key}.legacy-source.onnx")
        start = time.perf_counter()
        _export_torch(legacy, make_feeds(legacy, args.seed), source, args)
        tried["legacy export s"] = round(time.perf_counter() - start, 2)
        candidates += _optimize_bert(source, config, args, "legacy eager-attention export", tried)
    if not candidates:
        raise RuntimeError(f"optimize_model failed on every source and opt_level: {tried}")
    score, opt_level, label, optimized = max(candidates, key=lambda c: c[0])
    model = optimized.model
    if any(node.domain == "com.microsoft" for node in model.graph.node) and not any(
        imp.domain == "com.microsoft" for imp in model.opset_import
    ):
        # opt_level 0 writes contrib ops without importing their domain: checker and converters reject that
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    _fix_ir_version(model)
    _save_atomic(model, path)
    notes: dict[str, Any] = {
        "source": label,
        "opt_level": opt_level,
        "tried": tried,
        "use_gpu": args.provider == "cuda",
    }
    if score[0] == 0:
        notes["warning"] = "no Attention/MultiHeadAttention fused: the optimizer matched no attention pattern"
    return notes


def ensure_export(config: ModelConfig, args: argparse.Namespace, budget: Budget, report: Report) -> Path | None:
    """The cached export, or a new one; None when the budget cannot fit it (recorded as skipped)."""
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{config.key}.onnx"
    meta_path = work / f"{config.key}.meta.json"
    wanted = config.describe() | {"seed": args.seed, "dynamo_opset": args.dynamo_opset}
    if config.base:
        wanted["fused_source"] = args.fused_source
    if path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("config") == wanted:
            report.model(config.name)["export"] = meta | {"cached": True}
            return path
    base_path = None
    if config.base and args.fused_source != "legacy":
        base_path = ensure_export(model_config(config.base, config.smoke, args.batch, args.seq), args, budget, report)
        if base_path is None:
            return None
    estimate = SMOKE_ESTIMATE_S if config.smoke else EXPORT_ESTIMATE_S[config.name]
    if budget.exhausted or not budget.allows(estimate):
        report.skip(config.name, "export", f"budget: {budget.left():.0f} s left, export needs ~{estimate} s")
        budget.exhausted = True
        return None
    log(f"{config.name}: exporting ({config.exporter}) ...")
    start = time.perf_counter()
    if base_path is not None:
        notes = _fuse_bert(config, base_path, path, args)
    else:
        notes = _export_torch(config, make_feeds(config, args.seed), path, args)
    seconds = time.perf_counter() - start
    model = onnx.load(str(path), load_external_data=False)
    meta = {
        "config": wanted,
        "export_s": round(seconds, 2),
        "file_mb": round(path.stat().st_size / 2**20, 1),
        "ir_version": model.ir_version,
        "opsets": {imp.domain or "ai.onnx": imp.version for imp in model.opset_import},
        "nodes": len(model.graph.node),
        "op_types": dict(Counter(n.op_type for n in model.graph.node).most_common()),
        "notes": notes,
    }
    meta_path.write_text(json.dumps(meta, indent=1))
    report.model(config.name)["export"] = meta | {"cached": False}
    report.model(config.name)["variants"] = {}  # rows merged from an earlier file measured other weights
    for stale in path.parent.glob(f"{config.key}.ref-*.npz"):
        stale.unlink()
    log(f"{config.name}: exported in {seconds:.1f} s, {meta['nodes']} nodes, {meta['file_mb']} MB, {meta['opsets']}")
    return path


# --------------------------------------------------------------------------------------------------------------
# Variants: conversion
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    key: str  # the name in the JSON
    kind: str  # fp32 | ort_fp16 | ort_amp | occ_fp16 | amp
    tf32: bool = False
    mode: str | None = None
    mixlist: str | None = None


class Skip(Exception):
    """A variant that cannot run here for a known, benign reason (a peer not installed)."""


def parse_variants(text: str, mixlists: Sequence[str], mixlist_mode: str) -> list[Variant]:
    names = DEFAULT_VARIANTS if text in ("", "all") else tuple(v.strip() for v in text.split(",") if v.strip())
    variants: list[Variant] = []
    for name in names:
        if name == "fp32":
            variants.append(Variant("fp32", "fp32"))
        elif name == "fp32_tf32":
            variants.append(Variant("fp32_tf32", "fp32", tf32=True))
        elif name in ("ort_fp16", "ort_amp", "occ_fp16"):
            variants.append(Variant(name, name))
        elif name.startswith("amp_mixlist:"):
            mixlist = name.split(":", 1)[1]
            variants.append(Variant(f"mix_{Path(mixlist).stem}", "amp", mode=mixlist_mode, mixlist=mixlist))
        elif name.startswith("amp_"):
            variants.append(Variant(name, "amp", mode=name[4:]))
        elif name in AMP_MODES:
            variants.append(Variant(f"amp_{name}", "amp", mode=name))
        else:
            raise SystemExit(f"unknown variant {name!r}: see --help")
    for spec in mixlists:
        label, sep, mixlist = spec.partition("=")
        if not sep or not label or not mixlist:
            raise SystemExit(f"--mixlist wants NAME=PATH, got {spec!r}")
        variants.append(Variant(f"mix_{label}", "amp", mode=mixlist_mode, mixlist=mixlist))
    for variant in variants:
        if variant.mixlist and not Path(variant.mixlist).is_file():
            raise SystemExit(f"mixlist {variant.mixlist} not found")
    return variants


def convert(variant: Variant, path: Path, target: str) -> tuple[onnx.ModelProto | None, float | None, dict[str, Any]]:
    """(model, seconds, notes). Seconds cover loading the saved export and converting it, for every tool alike.
    For fp32 the model and seconds are None: the session loads the file itself."""
    notes: dict[str, Any] = {}
    if variant.kind == "fp32":
        return None, None, notes
    if variant.kind == "occ_fp16":
        try:
            from onnxconverter_common import float16 as occ_float16
        except ImportError as exc:
            raise Skip(f"onnxconverter-common not installed ({exc})") from None
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the peers warn once per clamped weight
        if variant.kind == "amp":
            import ampconfig
            from ampconfig.rewrite.float_cast import float32_to_float16  # what the command line converts with

            result = ampconfig.rewrite_model_detailed(
                str(path),
                precision_mode=variant.mode,
                target=target,
                modify_mixlist=variant.mixlist,
                float16_encoder=float32_to_float16,
            )
            model = result.model
            seconds = time.perf_counter() - start
            notes["casts_inserted"] = result.stats.casts_inserted
            notes["decisions"] = dict(Counter(str(d.dtype) for d in result.decisions))
            messages = list(getattr(result, "warnings", []))
            if messages:
                notes["warnings"] = [w[:200] for w in messages[:5]] + (
                    [f"... {len(messages) - 5} more"] if len(messages) > 5 else []
                )
            return model, seconds, notes
        source = onnx.load(str(path))
        if variant.kind == "occ_fp16":
            model = occ_float16.convert_float_to_float16(source, keep_io_types=True)
        else:
            from onnxruntime.transformers import float16 as ort_float16

            block = None
            if variant.kind == "ort_amp":
                block = sorted(set(ort_float16.DEFAULT_OP_BLOCK_LIST) | set(ORT_AMP_BLOCK))
                notes["op_block_list_added"] = list(ORT_AMP_BLOCK)
            model = ort_float16.convert_float_to_float16(source, keep_io_types=True, op_block_list=block)
    return model, time.perf_counter() - start, notes


# --------------------------------------------------------------------------------------------------------------
# Graph facts: checker verdict, node counts, nodes by output dtype
# --------------------------------------------------------------------------------------------------------------

CHECKER_IN_MEMORY_LIMIT = 1_800_000_000  # protobuf's 2 GB limit, with a margin


def checker_verdict(model: onnx.ModelProto | None, path: Path) -> str:
    """Returns "ok" or "INVALID <reason>". A model near 2 GB is saved with external data and checked from the file."""
    try:
        if model is None:
            onnx.checker.check_model(str(path), full_check=True)
        elif model.ByteSize() < CHECKER_IN_MEMORY_LIMIT:
            onnx.checker.check_model(model, full_check=True)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                onnx.save_model(model, f"{tmp}/m.onnx", save_as_external_data=True, location="m.onnx.data")
                onnx.checker.check_model(f"{tmp}/m.onnx", full_check=True)
    except Exception as exc:  # checker errors, and shape-inference errors full_check raises
        return f"INVALID {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return "ok"


def _light_sorted_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph without large initializers (turned into typed inputs, never copied) and topologically sorted, for
    a cheap shape inference. Sorting matters for ORT's converter, which appends input casts after their consumers."""
    light = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import, functions=model.functions)
    source, graph = model.graph, light.graph
    graph.name = source.name
    graph.input.extend(source.input)
    graph.output.extend(source.output)
    graph.value_info.extend(source.value_info)
    for tensor in source.initializer:
        if math.prod(tensor.dims) > 4096:
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
        else:
            graph.initializer.append(tensor)
    produced = {v.name for v in graph.input} | {t.name for t in graph.initializer} | {""}
    pending = list(source.node)
    while pending:  # Kahn's algorithm by repeated passes: these graphs are nearly sorted already
        rest = []
        for node in pending:
            if all(name in produced for name in node.input):
                graph.node.append(node)
                produced.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):  # inputs from outer scopes or a cycle: keep the remainder as it is
            graph.node.extend(rest)
            break
        pending = rest
    return light


def graph_facts(model: onnx.ModelProto | None, path: Path) -> dict[str, Any]:
    """Node and Cast counts (subgraphs included) and top-level nodes by the dtype of their first output."""
    if model is None:
        model = onnx.load(str(path))
    nodes = casts = 0
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            nodes += 1
            casts += node.op_type == "Cast"
            stack.extend(attr.g for attr in node.attribute if attr.type == onnx.AttributeProto.GRAPH)
            stack.extend(attr.graphs for attr in node.attribute if attr.type == onnx.AttributeProto.GRAPHS)
    facts: dict[str, Any] = {"nodes": nodes, "casts": casts}
    try:
        light = _light_sorted_copy(model)
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False)
        types = {
            v.name: v.type.tensor_type.elem_type
            for v in (*inferred.graph.input, *inferred.graph.output, *inferred.graph.value_info)
        }
        types.update({t.name: t.data_type for t in inferred.graph.initializer})
        by_dtype: Counter[str] = Counter()
        for node in inferred.graph.node:
            if node.op_type == "Cast":
                continue
            elem = types.get(node.output[0]) if node.output else None
            if elem in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
                by_dtype[onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem != 16 else "bfloat16"] += 1
            else:
                by_dtype["other" if elem else "unknown"] += 1
        facts["nodes_by_output_dtype"] = dict(by_dtype)
    except Exception as exc:  # counting is a nicety: never lose the variant over it
        facts["nodes_by_output_dtype"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return facts


# --------------------------------------------------------------------------------------------------------------
# Sessions, latency with IOBinding, accuracy
# --------------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _export_facts(path: str, mtime: float) -> dict[str, Any]:
    """Checker verdict and graph facts of an export file, once for fp32 and fp32_tf32 (``mtime`` keys the cache)."""
    return {"valid": checker_verdict(None, Path(path))} | graph_facts(None, Path(path))


class CudaNotUsed(RuntimeError):
    """ONNX Runtime fell back to the CPU provider although CUDA was asked for."""


def make_session(source: bytes | Path, provider: str, tf32: bool, conv_algo: str, log_level: int = 3) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = log_level
    if provider == "cuda":
        cuda_options = {"device_id": "0", "use_tf32": "1" if tf32 else "0", "cudnn_conv_algo_search": conv_algo}
        providers: list[Any] = [("CUDAExecutionProvider", cuda_options), "CPUExecutionProvider"]
    else:
        providers = ["CPUExecutionProvider"]
    session = ort.InferenceSession(str(source) if isinstance(source, Path) else source, options, providers=providers)
    if provider == "cuda" and "CUDAExecutionProvider" not in session.get_providers():
        raise CudaNotUsed(f"CUDA was asked for but the session runs on {session.get_providers()}")
    return session


def time_iobinding(
    session: Any, feeds: dict[str, np.ndarray], provider: str, warmup: int, runs: int
) -> tuple[float, float, dict[str, np.ndarray]]:
    """(median ms, min ms, outputs). Inputs are copied to the device once; outputs stay on the device until the
    end, so the timed region is the model alone."""
    import onnxruntime as ort

    device = "cuda" if provider == "cuda" else "cpu"
    binding = session.io_binding()
    values = {name: ort.OrtValue.ortvalue_from_numpy(array, device, 0) for name, array in feeds.items()}
    for name, value in values.items():
        binding.bind_ortvalue_input(name, value)
    names = [output.name for output in session.get_outputs()]
    for name in names:
        binding.bind_output(name, device)
    for _ in range(warmup):
        session.run_with_iobinding(binding)
    samples = []
    for _ in range(runs):
        binding.synchronize_inputs()
        start = time.perf_counter()
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        samples.append((time.perf_counter() - start) * 1e3)
    outputs = dict(zip(names, binding.copy_outputs_to_cpu()))
    return statistics.median(samples), min(samples), outputs


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None  # JSON has no NaN/inf


def accuracy(outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per output (matched by name, else by position): relative L2, max abs, non-finite count, top-1 for logits."""
    per_output: dict[str, Any] = {}
    ref_names = list(reference)
    for index, (name, got_raw) in enumerate(outputs.items()):
        ref_name = name if name in reference else ref_names[index]
        got = np.asarray(got_raw, dtype=np.float64)
        want = np.asarray(reference[ref_name], dtype=np.float64)
        if got.shape != want.shape:
            per_output[name] = {"error": f"shape {got.shape} vs reference {want.shape}"}
            continue
        diff = got - want
        row: dict[str, Any] = {
            "rel_l2": _finite_or_none(float(np.linalg.norm(diff) / max(float(np.linalg.norm(want)), 1e-30))),
            "max_abs": _finite_or_none(float(np.max(np.abs(diff)))) if diff.size else 0.0,
            "nonfinite": int(np.size(got) - np.count_nonzero(np.isfinite(got))),
        }
        if name == "logits" and got.ndim == 2:
            row["top1"] = float(np.mean(np.argmax(got, axis=1) == np.argmax(want, axis=1)))
        per_output[name] = row
    first = next(iter(per_output.values()), {})
    rel = [row.get("rel_l2") for row in per_output.values()]
    return {
        "rel_l2": first.get("rel_l2"),
        "max_abs": first.get("max_abs"),
        "nonfinite": sum(row.get("nonfinite", 0) for row in per_output.values()),
        "rel_l2_worst": None if any(r is None for r in rel) else max(rel, default=None),
        "outputs": per_output,
    }


def placement(source: bytes | Path, provider: str, tf32: bool, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    """Which provider ran each node (ORT's profiler, one run in an extra session): CPU-placed ops by type."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        options.profile_file_prefix = f"{tmp}/profile"
        providers: list[Any] = (
            [("CUDAExecutionProvider", {"use_tf32": "1" if tf32 else "0", "cudnn_conv_algo_search": "HEURISTIC"})]
            if provider == "cuda"
            else []
        ) + ["CPUExecutionProvider"]
        session = ort.InferenceSession(
            str(source) if isinstance(source, Path) else source, options, providers=providers
        )
        session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    by_provider: Counter[str] = Counter()
    cpu_ops: Counter[str] = Counter()
    cpu_us = 0
    for event in events:
        args = event.get("args", {})
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith("_kernel_time"):
            continue
        by_provider[args.get("provider", "?")] += 1
        if args.get("provider") == "CPUExecutionProvider":
            cpu_ops[args.get("op_name", "?")] += 1
            cpu_us += int(event.get("dur", 0))
    return {"nodes_by_provider": dict(by_provider), "cpu_ops": dict(cpu_ops), "cpu_kernel_us": cpu_us}


# --------------------------------------------------------------------------------------------------------------
# Report (incremental JSON) and budget
# --------------------------------------------------------------------------------------------------------------


class Report:
    """The JSON report, rewritten atomically after every step; merges into an existing file."""

    def __init__(self, path: Path | None, meta: dict[str, Any]) -> None:
        self.path = path
        self.data: dict[str, Any] = {"_meta": meta, "models": {}, "skipped": []}
        if path is not None and path.exists():
            previous = json.loads(path.read_text())
            self.data["models"] = previous.get("models", {})
            self.data["skipped"] = previous.get("skipped", [])
            self.data["_meta"]["previous_runs"] = [
                *previous.get("_meta", {}).get("previous_runs", []),
                {k: v for k, v in previous.get("_meta", {}).items() if k != "previous_runs"},
            ]

    def model(self, name: str) -> dict[str, Any]:
        return self.data["models"].setdefault(name, {"variants": {}})

    def record(self, model: str, variant: str, row: dict[str, Any]) -> None:
        self.model(model)["variants"][variant] = row
        self.save()

    def skip(self, model: str, variant: str, reason: str) -> None:
        self.data["skipped"].append({"model": model, "variant": variant, "reason": reason})
        log(f"{model} {variant}: SKIPPED ({reason})")
        self.save()

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".partial")
        tmp.write_text(json.dumps(self.data, indent=1, allow_nan=False))
        os.replace(tmp, self.path)


@dataclass
class Budget:
    """Stops starting new work that would not finish within ``limit_s`` of the process start."""

    limit_s: float | None
    observed: dict[str, list[float]] = field(default_factory=dict)
    exhausted: bool = False

    def left(self) -> float:
        return math.inf if self.limit_s is None else self.limit_s - (time.monotonic() - STARTED)

    def allows(self, estimate_s: float) -> bool:
        return self.left() >= estimate_s * 1.2

    def variant_estimate(self, model: str, smoke: bool) -> float:
        seen = self.observed.get(model)
        if seen:
            return max(seen)
        return SMOKE_ESTIMATE_S if smoke else VARIANT_ESTIMATE_S.get(model, 30.0)


# --------------------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------------------


def _reference(
    config: ModelConfig, path: Path, feeds: dict[str, np.ndarray], args: argparse.Namespace
) -> tuple[Path, dict[str, np.ndarray] | None]:
    """The cached fp32 (TF32 off) outputs for these feeds on this provider, if any."""
    ref_path = Path(args.work) / f"{config.key}.ref-{args.provider}.npz"
    if ref_path.exists():
        with np.load(ref_path) as cached:
            if str(cached["__feeds__"]) == feeds_digest(feeds) and float(cached["__mtime__"]) == path.stat().st_mtime:
                return ref_path, {k[5:]: cached[k] for k in cached.files if k.startswith("out__")}
    return ref_path, None


def _save_reference(ref_path: Path, model_path: Path, feeds: dict[str, np.ndarray], outputs: dict) -> None:
    arrays = {f"out__{name}": value for name, value in outputs.items()}
    tmp = ref_path.with_name(ref_path.name + ".partial.npz")
    np.savez(tmp, __feeds__=feeds_digest(feeds), __mtime__=model_path.stat().st_mtime, **arrays)
    os.replace(tmp, ref_path)


def run_variant(
    config: ModelConfig,
    variant: Variant,
    path: Path,
    feeds: dict[str, np.ndarray],
    reference: dict[str, np.ndarray] | None,
    args: argparse.Namespace,
) -> tuple[dict[str, Any], dict[str, np.ndarray] | None]:
    """One (model, variant): the row for the JSON (an "error" and its "phase" on failure) and the outputs."""
    row: dict[str, Any] = {"kind": variant.kind}
    if variant.mode:
        row["mode"] = variant.mode
    if variant.mixlist:
        row["mixlist"] = variant.mixlist
    phase = "convert"
    start = time.perf_counter()
    try:
        model, seconds, notes = convert(variant, path, args.target)
        row["convert_s"] = None if seconds is None else round(seconds, 3)
        row.update(notes)
        phase = "check"
        check_start = time.perf_counter()
        if model is None:
            row.update(_export_facts(str(path), path.stat().st_mtime))
        else:
            row["valid"] = checker_verdict(model, path)
            row.update(graph_facts(model, path))
        row["check_s"] = round(time.perf_counter() - check_start, 2)
        phase = "session"
        session_start = time.perf_counter()
        source: bytes | Path = path if model is None else model.SerializeToString()
        del model
        session = make_session(source, args.provider, variant.tf32, args.conv_algo)
        row["session_s"] = round(time.perf_counter() - session_start, 2)
        row["providers"] = session.get_providers()
        phase = "run"
        median, fastest, outputs = time_iobinding(session, feeds, args.provider, args.warmup, args.runs)
        row["ms"], row["ms_min"] = round(median, 4), round(fastest, 4)
        del session
        if args.placement:
            phase = "placement"
            row["placement"] = placement(source, args.provider, variant.tf32, feeds)
        phase = "accuracy"
        if reference is not None:
            row.update(accuracy(outputs, reference))
        elif variant.kind == "fp32" and not variant.tf32:
            row.update({"rel_l2": 0.0, "max_abs": 0.0, "reference": True})
            row["nonfinite"] = int(sum(np.size(v) - np.count_nonzero(np.isfinite(v)) for v in outputs.values()))
    except Skip as exc:
        row.update({"skipped": str(exc)})
        outputs = None
    except Exception as exc:  # one (model, variant) failing is a result; the run goes on
        row.update({"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}", "phase": phase})
        row["traceback"] = traceback.format_exc()[-1500:]
        outputs = None
    finally:
        gc.collect()  # frees the session's device memory before the next one
    row["total_s"] = round(time.perf_counter() - start, 2)
    return row, outputs


def _summary(model: str, key: str, row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{model} {key}: ERROR in {row['phase']}: {row['error'][:300]}"
    if "skipped" in row:
        return f"{model} {key}: skipped ({row['skipped']})"
    rel, convert_s = row.get("rel_l2"), row.get("convert_s")
    return (
        f"{model} {key}: {row['ms']:.3f} ms (min {row['ms_min']:.3f}), rel-L2 {_fmt(rel, '.2e')}, nonfinite "
        f"{row.get('nonfinite', 'n/a')}, casts {row['casts']}, valid {row['valid'][:60]}, convert "
        f"{_fmt(convert_s, '.2f')} s, total {row['total_s']:.1f} s"
    )


def run_model(name: str, variants: list[Variant], args: argparse.Namespace, budget: Budget, report: Report) -> None:
    config = model_config(name, args.smoke, args.batch, args.seq)
    try:
        path = ensure_export(config, args, budget, report)
    except Exception as exc:
        report.model(name)["export_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:800]}"
        report.model(name)["export_traceback"] = traceback.format_exc()[-2000:]
        report.save()
        log(f"{name}: EXPORT FAILED: {report.model(name)['export_error'][:400]}")
        return
    if path is None:
        return
    report.model(name).pop("export_error", None)
    feeds = make_feeds(config, args.seed)
    report.model(name)["inputs"] = {k: [str(v.dtype), list(v.shape)] for k, v in feeds.items()}
    ref_path, reference = _reference(config, path, feeds, args)
    todo = list(variants)
    if reference is None and not any(v.key == "fp32" for v in todo):
        todo.insert(0, Variant("fp32", "fp32"))  # the reference must exist before anything is compared
    elif reference is None:
        todo.sort(key=lambda v: v.key != "fp32")
    for index, variant in enumerate(todo):
        estimate = budget.variant_estimate(name, args.smoke)
        if budget.exhausted or not budget.allows(estimate):
            # Stop here rather than squeeze in a cheaper variant: the JSON then ends on a clear boundary.
            rest = ",".join(v.key for v in todo[index:])
            report.skip(name, rest, f"budget: {budget.left():.0f} s left, a variant needs ~{estimate:.0f} s")
            budget.exhausted = True
            break
        row, outputs = run_variant(config, variant, path, feeds, reference, args)
        budget.observed.setdefault(name, []).append(row["total_s"])
        if variant.key == "fp32" and outputs is not None and reference is None:
            reference = outputs
            _save_reference(ref_path, path, feeds, outputs)
        report.record(name, variant.key, row)
        log(_summary(name, variant.key, row))


def machine(args: argparse.Namespace) -> dict[str, Any]:
    import onnxruntime as ort

    versions: dict[str, str] = {"python": platform.python_version(), "onnx": onnx.__version__}
    versions["onnxruntime"] = ort.__version__
    for module in ("ampconfig", "torch", "transformers", "torchvision", "onnxscript", "onnxconverter_common"):
        with contextlib.suppress(Exception):
            versions[module] = __import__(module).__version__
    gpu = None
    with contextlib.suppress(Exception):
        gpu = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "gpu": gpu,
        "versions": versions,
        "provider": args.provider,
        "target": args.target,
        "warmup": args.warmup,
        "runs": args.runs,
        "conv_algo": args.conv_algo,
        "smoke": args.smoke,
        "argv": sys.argv[1:],
        "script": "benchmarks/gpu_models.py",
    }


def cuda_preflight(args: argparse.Namespace) -> str | None:
    """Why a CUDA session cannot be made here (checked once on a one-node model), or None."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return f"this onnxruntime ({ort.__file__}) has no CUDAExecutionProvider: {ort.get_available_providers()}"
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])],
        "preflight",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = MAX_IR_VERSION
    try:
        make_session(model.SerializeToString(), "cuda", False, args.conv_algo, log_level=2)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc} (is LD_LIBRARY_PATH set to the CUDA 13 libraries? see benchmarks/GPU.md)"
    return None


# --------------------------------------------------------------------------------------------------------------
# Markdown table
# --------------------------------------------------------------------------------------------------------------

LABELS = {
    "fp32": "fp32 (TF32 off, reference)",
    "fp32_tf32": "fp32 + TF32",
    "ort_fp16": "ORT float16 (all fp16)",
    "ort_amp": "ORT float16 + block list",
    "occ_fp16": "onnxconverter-common (all fp16)",
}


def _fmt(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _dtype_cell(row: dict[str, Any]) -> str:
    counts = row.get("nodes_by_output_dtype", {})
    if "error" in counts:
        return "–"
    low = counts.get("float16", 0) + counts.get("bfloat16", 0)
    return f"{low}/{counts.get('float32', 0)}"


def table(paths: Sequence[Path]) -> str:
    """The markdown table for docs/benchmarks.md from one or more JSON files (later files win per variant)."""
    models: dict[str, dict[str, Any]] = {}
    metas = []
    for path in paths:
        data = json.loads(path.read_text())
        metas.append(data.get("_meta", {}))
        for name, model in data.get("models", {}).items():
            merged = models.setdefault(name, {"variants": {}})
            merged["variants"].update(model.get("variants", {}))
            merged.update({k: v for k, v in model.items() if k != "variants"})
    lines = []
    for meta in metas:
        versions = meta.get("versions", {})
        lines.append(
            f"- {meta.get('date', '?')}: {meta.get('gpu') or meta.get('provider')}, ORT {versions.get('onnxruntime')}, "
            f"torch {versions.get('torch')}, transformers {versions.get('transformers')}, ampconfig "
            f"{versions.get('ampconfig')}; IOBinding, {meta.get('warmup')} warm-up, median of {meta.get('runs')}"
            f"{' (smoke: tiny models on CPU)' if meta.get('smoke') else ''}"
        )
    lines += [
        "",
        "| model | variant | ms (median) | ms (min) | ORT fp16 ms ÷ ms | rel-L2 | max abs | non-finite | casts "
        "| fp16+bf16 / fp32 nodes | convert s | valid |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, model in models.items():
        variants = model["variants"]
        if "export_error" in model and not variants:
            lines.append(f"| {name} | export failed | {model['export_error'][:80]} |" + " |" * 9)
            continue
        ort_ms = variants.get("ort_fp16", {}).get("ms")
        for key, row in variants.items():
            label = LABELS.get(key) or (
                f"ampconfig {key[4:]}" if key.startswith("amp_") else f"ampconfig mixlist {key[4:]}"
            )
            if "error" in row or "skipped" in row:
                reason = row.get("error") or row.get("skipped")
                text = " ".join(str(reason).split())[:90].replace("|", "/")
                lines.append(f"| {name} | {label} | {'error' if 'error' in row else 'skipped'}: {text} |" + " |" * 9)
                continue
            speedup = f"{ort_ms / row['ms']:.2f}×" if ort_ms and row.get("ms") else "–"
            valid = row.get("valid", "?")
            valid = "ok" if valid == "ok" else valid[:50].replace("|", "/")
            lines.append(
                f"| {name} | {label} | {_fmt(row.get('ms'), '.2f')} | {_fmt(row.get('ms_min'), '.2f')} | {speedup} "
                f"| {_fmt(row.get('rel_l2'), '.1e')} | {_fmt(row.get('max_abs'), '.2g')} | {row.get('nonfinite', '–')} "
                f"| {row.get('casts', '–')} | {_dtype_cell(row)} | {_fmt(row.get('convert_s'), '.2f')} | {valid} |"
            )
    lines += [
        "",
        "rel-L2 and max abs are of the first output against fp32 with TF32 off; non-finite counts every output; "
        "convert s is load + convert from the saved export for every tool.",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# ORT kernel and contrib-schema dumps (each in a subprocess: listing kernels segfaults without CUDA libraries)
# --------------------------------------------------------------------------------------------------------------

KERNEL_PROVIDERS = ("CPUExecutionProvider", "CUDAExecutionProvider")


def _kernel_row(kernel: Any) -> dict[str, Any]:
    since, until = kernel.version_range
    return {
        "op": kernel.op_name,
        "domain": kernel.domain or "ai.onnx",
        "provider": kernel.provider,
        "since": since,
        "until": until,
        "types": {name: sorted(types) for name, types in sorted(kernel.type_constraints.items())},
    }


def _schema_row(schema: Any) -> dict[str, Any]:
    def params(items: Any) -> list[list[str]]:
        return [[p.name, p.typeStr, p.option.name] for p in items]

    return {
        "name": schema.name,
        "domain": schema.domain,
        "since": schema.since_version,
        "inputs": params(schema.inputs),
        "outputs": params(schema.outputs),
        "types": {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints},
        "attributes": sorted(schema.attributes),
    }


def kernels_child(mode: str, out: str) -> int:
    """In a subprocess: write one dump to ``out``. A crash here is the parent's information, not its failure."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    if mode == "schemas":
        rows = [_schema_row(s) for s in state.get_all_operator_schema() if s.domain == "com.microsoft"]
    elif mode.startswith("all"):
        if mode == "all_after_cuda_session":
            with contextlib.suppress(Exception):  # loads the CUDA provider library before listing
                make_session(_relu_model().SerializeToString(), "cuda", False, "HEURISTIC")
        rows = [_kernel_row(k) for k in state.get_all_opkernel_def() if k.provider in KERNEL_PROVIDERS]
    elif mode == "plugin_cuda":
        rows = _cuda_plugin_kernels(state)
    else:
        rows = [_kernel_row(k) for k in state.get_registered_ep_kernel_defs(mode.split(":", 1)[1])]
    Path(out).write_text(json.dumps(rows, separators=(",", ":")))
    return 0


def _cuda_plugin_kernels(state: Any) -> list[dict[str, Any]]:
    """The CUDA kernels through the plugin-EP interface: ORT 1.31's CUDA provider library also exports
    CreateEpFactories, so it can be registered alone, without the TensorRT provider that get_all_opkernel_def
    also loads (and crashes on where TensorRT is missing)."""
    import onnxruntime as ort

    library = Path(ort.__file__).parent / "capi" / "libonnxruntime_providers_cuda.so"
    ort.register_execution_provider_library("CUDAExecutionProvider", str(library))
    names = sorted({device.ep_name for device in ort.get_ep_devices() if "cuda" in device.ep_name.lower()})
    for name in names or ["CUDAExecutionProvider"]:
        with contextlib.suppress(Exception):
            kernels = state.get_registered_ep_kernel_defs(name)
            if kernels:
                return [_kernel_row(k) | {"provider": "CUDAExecutionProvider", "ep_name": name} for k in kernels]
    raise RuntimeError(f"no kernels from the CUDA plugin EP (EP names {names})")


def _relu_model() -> onnx.ModelProto:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = MAX_IR_VERSION
    return model


def _child(mode: str, tmp: str) -> tuple[list[dict[str, Any]] | None, dict[str, Any]]:
    out = f"{tmp}/{mode.replace(':', '_')}.json"
    command = [sys.executable, os.path.abspath(__file__), "--kernels-child", mode, out]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return None, {"mode": mode, "error": "timed out after 300 s"}
    attempt: dict[str, Any] = {"mode": mode, "returncode": done.returncode}
    if done.returncode != 0 or not Path(out).exists():
        attempt["stderr_tail"] = done.stderr[-800:]
        return None, attempt
    rows = json.loads(Path(out).read_text())
    attempt["rows"] = len(rows)
    return rows, attempt


def dump_op_kernels(path: Path) -> dict[str, Any]:
    import onnxruntime as ort

    report: dict[str, Any] = {"onnxruntime": ort.__version__, "attempts": [], "kernels": {}, "contrib_schemas": None}
    with tempfile.TemporaryDirectory() as tmp:
        modes = ("all", "plugin_cuda", "all_after_cuda_session", *(f"ep:{p}" for p in KERNEL_PROVIDERS))
        for mode in modes:
            missing = [p for p in KERNEL_PROVIDERS if p not in report["kernels"]]
            wanted = {"plugin_cuda": "CUDAExecutionProvider"}.get(mode, mode[3:] if mode.startswith("ep:") else None)
            if not missing or (wanted is not None and wanted not in missing):
                continue
            log(f"op kernels: trying {mode} in a subprocess ...")
            rows, attempt = _child(mode, tmp)
            report["attempts"].append(attempt)
            for row in rows or []:
                if row["provider"] in missing:
                    report["kernels"].setdefault(row["provider"], []).append(row)
        rows, attempt = _child("schemas", tmp)
        report["attempts"].append(attempt)
        report["contrib_schemas"] = rows
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, separators=(",", ":")))
    counts = {p: len(v) for p, v in report["kernels"].items()}
    log(f"op kernels: {counts}, {len(rows or [])} com.microsoft schemas -> {path}")
    for attempt in report["attempts"]:
        log(f"  {str(attempt)[:300]}")
    return report


# --------------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpu_models.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated (default: {','.join(MODELS)})")
    parser.add_argument("--variants", default="all", help="comma-separated, or 'all' (default): see above")
    parser.add_argument("--mixlist", action="append", default=[], metavar="NAME=PATH", help="extra mixlist variant")
    parser.add_argument("--mixlist-mode", default="allow_mix_precision", help="precision mode for mixlist variants")
    parser.add_argument("--work", default="gpu-work", help="export cache folder (default: ./gpu-work)")
    parser.add_argument("--json", type=Path, help="write (merge) the report here, after every step")
    parser.add_argument("--provider", choices=("cuda", "cpu"), help="default: cuda (cpu with --smoke)")
    parser.add_argument("--target", default="cuda", help="ampconfig's target op info (default: cuda)")
    parser.add_argument("--warmup", type=int, help="warm-up runs (default 10; 2 with --smoke)")
    parser.add_argument("--runs", type=int, help="timed runs (default 50; 5 with --smoke)")
    parser.add_argument(
        "--conv-algo",
        default="EXHAUSTIVE",
        choices=("EXHAUSTIVE", "HEURISTIC", "DEFAULT"),
        help="CUDA EP cudnn_conv_algo_search (default EXHAUSTIVE: ORT's default, what users get)",
    )
    parser.add_argument("--dynamo-opset", type=int, help="opset for the dynamo exports (default: the exporter's)")
    parser.add_argument(
        "--fused-source",
        default="auto",
        choices=("auto", "dynamo", "legacy"),
        help="bert_fused from the dynamo export, a legacy eager-attention export, or auto: dynamo, then legacy "
        "when no Attention was fused (default)",
    )
    parser.add_argument("--batch", type=int, help="override every model's batch size (own cache files)")
    parser.add_argument("--seq", type=int, help="override the token models' sequence length (own cache files)")
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed and input seed (default 0)")
    parser.add_argument("--budget-s", type=float, help="start no step that would end later than this after start")
    parser.add_argument("--placement", action="store_true", help="also record which provider ran each node (slow)")
    parser.add_argument("--smoke", action="store_true", help="tiny models on the CPU provider: tests the pipeline")
    parser.add_argument("--export-only", action="store_true", help="export (or find cached) models, run nothing")
    parser.add_argument("--table", type=Path, nargs="+", metavar="JSON", help="print the markdown table and exit")
    parser.add_argument("--op-kernels", type=Path, metavar="JSON", help="dump ORT kernel defs + contrib schemas")
    parser.add_argument("--kernels-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.provider = args.provider or ("cpu" if args.smoke else "cuda")
    args.warmup = args.warmup if args.warmup is not None else (2 if args.smoke else 10)
    args.runs = args.runs if args.runs is not None else (5 if args.smoke else 50)
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    if args.kernels_child:
        return kernels_child(*args.kernels_child)
    if args.table:
        print(table(args.table))
        return 0
    if args.op_kernels:
        dump_op_kernels(args.op_kernels)
        if not args.json:
            return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for name in models:
        model_config(name, args.smoke)  # unknown names fail here, before any work
    variants = parse_variants(args.variants, args.mixlist, args.mixlist_mode)
    if args.provider == "cuda":
        reason = cuda_preflight(args)
        if reason is not None:
            log(f"CUDA IS NOT USABLE, stopping: {reason}")
            return 3
    report = Report(args.json, machine(args))
    report.save()
    budget = Budget(args.budget_s)
    skipped_before = len(report.data["skipped"])
    log(f"models {models}; variants {[v.key for v in variants]}; provider {args.provider}; budget {args.budget_s} s")
    for name in models:
        if args.export_only:
            config = model_config(name, args.smoke, args.batch, args.seq)
            try:
                ensure_export(config, args, budget, report)
            except Exception as exc:
                report.model(name)["export_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:800]}"
                log(f"{name}: EXPORT FAILED: {report.model(name)['export_error'][:400]}")
            report.save()
            continue
        run_model(name, variants, args, budget, report)
    rows = [report.model(name) for name in models]
    errors = sum("error" in row for model in rows for row in model["variants"].values())
    failed = [name for name, model in zip(models, rows) if "export_error" in model]
    skipped = len(report.data["skipped"]) - skipped_before
    log(f"done: {errors} variant errors, failed exports {failed}, {skipped} skipped; report {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
