"""Hashes of everything ampconfig writes and prints for a fixed corpus, so that moving code (issue 37: the house)
can be shown to change none of it.

The corpus is 42 models the tests build (``tests/model_zoo.ZOO`` with the exporter-shaped suite,
``tests/unusual_models.UNUSUAL_MODELS``, the value, underflow, spectrum, STRING-input and quantized-block
models), written once to a folder (``corpus``). Then, for one checkout of ampconfig (this one, or ``--tree`` another,
first on the import path of a fresh process), every model goes through the command line in process, for each
precision mode and both targets:

- ``rewrite M -m MODE --target T -o OUT --json``: the written model's bytes and the JSON;
- ``explain M -m MODE --target T --json``: the JSON;
- ``lock M -m MODE --target T -o LOCK --json``: the lock's text and the JSON;

and every command's and subcommand's ``--help`` (issue 46: options declared once must not change a word of it),
``schema`` and ``lists --json`` for each target,
and once per model ``calibrate M -o RANGES --json`` (generated inputs, seed 0): the ranges file, and the rewrites
that read it (``rewrite --ranges RANGES`` in allow_mix_precision and force_fp16 for cuda). Paths are replaced by
placeholders before hashing; an exit code other than 0 is hashed with its JSON error like any output.

    python benchmarks/behaviour_hashes.py corpus --folder /tmp/corpus
    python benchmarks/behaviour_hashes.py hash --folder /tmp/corpus --out after.json [--tree /tmp/baseline]
    python benchmarks/behaviour_hashes.py compare before.json after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

MODES = (
    "force_fp32",
    "force_fp16",
    "allow_fp32_to_fp16",
    "must_keep_origin_dtype",
    "allow_mix_precision",
    "allow_mix_precision_fp16",
    "allow_mix_precision_bf16",
    "allow_fp32_to_bf16",
)
TARGETS = ("cpu", "cuda")
#: The modes whose rewrites are also hashed with the model's ranges file.
RANGED_MODES = ("allow_mix_precision", "force_fp16")


def build_corpus(folder: Path) -> list[str]:
    """Write every corpus model to ``folder`` as NAME.onnx; their names."""
    sys.path.insert(0, str(ROOT))
    import onnx

    from tests import input_models, quantized_models, spectrum_models, underflow_models, value_models
    from tests.model_zoo import ZOO
    from tests.unusual_models import UNUSUAL_MODELS

    builders = {
        **ZOO,
        **UNUSUAL_MODELS,
        "vad_if": value_models.vad_if,
        "char_lstm_loop": value_models.char_lstm_loop,
        "if_overflow": value_models.if_overflow,
        "nms_head": value_models.nms_head,
        "detector_bn": value_models.detector_bn,
        "gpt2_token_outliers": value_models.gpt2_token_outliers,
        "film_block": value_models.film_block,
        "near_miss_mlp": value_models.near_miss_mlp,
        "branch_named_main": value_models.branch_named_main,
        "mlp": value_models.mlp,
        "mlp_x1e5": lambda: value_models.mlp(scale=1e5),
        "cqt_front_end": underflow_models.cqt_front_end,
        "power_spectrum": spectrum_models.power_spectrum_model,
        "phoneme": input_models.phoneme_model,
        "category": input_models.category_model,
        "typed_inputs": input_models.typed_inputs_model,
        "float_block": quantized_models.float_block,
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, build in sorted(builders.items()):
        onnx.save_model(build(), folder / f"{name}.onnx")
    return sorted(builders)


#: What runs in the fresh process: the command line of whichever ampconfig comes first on its import path.
_HASHER = r"""
import hashlib, json, sys
from pathlib import Path
from typer.testing import CliRunner
import ampconfig
from ampconfig.cli import app

folder, out_dir, modes, targets, ranged = Path(sys.argv[1]), Path(sys.argv[2]), *map(json.loads, sys.argv[3:6])
runner = CliRunner()
hashes = {}

def clean(text):
    return text.replace(str(out_dir), "<out>").replace(str(folder), "<corpus>")

def digest(data):
    return hashlib.sha256(data).hexdigest()

def invoke(key, args, written=None):
    result = runner.invoke(app, args)
    hashes[key + " exit"] = str(result.exit_code)
    hashes[key + " json"] = digest(clean(result.stdout).encode())
    if written is not None:
        hashes[key + " file"] = file_digest(Path(written))

def file_digest(path):  # a written file's digest (a JSON file's with its paths replaced); the file then removed
    if not path.exists():
        return "<none>"
    data = path.read_bytes()
    path.unlink()
    return digest(clean(data.decode()).encode() if path.suffix == ".json" else data)

def command_paths(command, path=()):  # every command and subcommand, as the words that reach it
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from command_paths(sub, (*path, name))

import typer.main
for words in command_paths(typer.main.get_command(app)):
    invoke(" ".join(("help", *words)), [*words, "--help"])
invoke("schema", ["schema"])
for target in targets:
    invoke(f"lists {target}", ["lists", "-m", "allow_mix_precision", "--target", target, "--json"])

for model in sorted(folder.glob("*.onnx")):
    name = model.stem
    ranges = out_dir / f"{name}.ranges.json"
    invoke(f"{name} calibrate", ["calibrate", str(model), "-o", str(ranges), "--json"])
    hashes[f"{name} calibrate file"] = digest(clean(ranges.read_text()).encode()) if ranges.exists() else "<none>"
    for mode in modes:
        for target in targets:
            base = ["-m", mode, "--target", target]
            key = f"{name} {mode} {target}"
            out = out_dir / "out.onnx"
            invoke(f"{key} rewrite", ["rewrite", str(model), *base, "-o", str(out), "--json"], out)
            invoke(f"{key} explain", ["explain", str(model), *base, "--json"])
            lock = out_dir / "lock.json"
            invoke(f"{key} lock", ["lock", str(model), *base, "-o", str(lock), "--json"], lock)
            if target == "cuda" and mode in ranged and ranges.exists():
                ranged_args = ["rewrite", str(model), *base, "--ranges", str(ranges), "-o", str(out), "--json"]
                invoke(f"{key} rewrite --ranges", ranged_args, out)
    if ranges.exists():
        ranges.unlink()
print(json.dumps({"ampconfig": ampconfig.__file__, "hashes": hashes}))
"""


def hash_tree(folder: Path, tree: Path | None) -> dict[str, Any]:
    """Every hash for the corpus in ``folder``, by the ampconfig of ``tree`` (None: this checkout)."""
    if not any(folder.glob("*.onnx")):
        raise SystemExit(f"no models in {folder}: write the corpus first (corpus --folder {folder})")
    environment = dict(os.environ)
    environment.update(COLUMNS="120", TERM="dumb")  # --help's layout follows the terminal's width
    if tree is not None:
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree.resolve()), environment.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="ampconfig-hashes-") as out_dir:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _HASHER,
                str(folder.resolve()),
                out_dir,
                json.dumps(MODES),
                json.dumps(TARGETS),
                json.dumps(RANGED_MODES),
            ],
            cwd=out_dir,
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"hashing failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The keys whose hashes differ, or that only one side has."""
    one, other = before["hashes"], after["hashes"]
    return sorted(key for key in one.keys() | other.keys() if one.get(key) != other.get(key))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True)
    corpus = verbs.add_parser("corpus", help="write the corpus models")
    corpus.add_argument("--folder", type=Path, required=True)
    hashing = verbs.add_parser("hash", help="hash one checkout's outputs on the corpus")
    hashing.add_argument("--folder", type=Path, required=True)
    hashing.add_argument("--out", type=Path, required=True)
    hashing.add_argument("--tree", type=Path, help="another checkout's root (default: this one)")
    comparing = verbs.add_parser("compare", help="the outputs whose hashes differ between two hash files")
    comparing.add_argument("before", type=Path)
    comparing.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.verb == "corpus":
        names = build_corpus(args.folder)
        print(f"{len(names)} models in {args.folder}")
    elif args.verb == "hash":
        result = hash_tree(args.folder, args.tree)
        digest = hashlib.sha256(json.dumps(result["hashes"], sort_keys=True).encode()).hexdigest()
        args.out.write_text(json.dumps({**result, "digest": digest}, indent=1, sort_keys=True) + "\n")
        print(f"{len(result['hashes'])} hashes from {result['ampconfig']}: digest {digest}")
    else:
        before, after = (json.loads(path.read_text()) for path in (args.before, args.after))
        changed = compare(before, after)
        print(f"{len(changed)} of {len(before['hashes'])} differ" + "".join(f"\n  {key}" for key in changed))
        raise SystemExit(1 if changed else 0)


if __name__ == "__main__":
    main()
