#!/usr/bin/env bash
# Moves onnxruntime-gpu, ampconfig's missing dependencies and ampconfig itself to the lent GPU machine, which
# reaches no package registry and takes at most 64 MiB per call (see ../shared/gpu.md and benchmarks/GPU.md).
#
#   benchmarks/gpu_bundle.sh build     here: download the wheels (cp312, manylinux x86_64), build ampconfig's
#                                      wheel, tar them and split the tar into 60 MB parts .gpu0/bpart0 ...
#                                      .gpuN/bpartN at the repository root (each folder ignored by its own
#                                      .gitignore, so only a call that carries it sends it)
#   benchmarks/gpu_bundle.sh install   there, after every part was copied to /root/bp: unpack, install into
#                                      /tmp/site, install an extra wheel only where the machine's own package
#                                      misses ampconfig's pin, and show that the CUDA provider loads
#
# Every later call there sources benchmarks/gpu_env.sh for PYTHONPATH and the CUDA library path.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PART_BYTES=60000000
# Wheels the GPU machine lacks. pydantic and jsonschema come with their dependencies resolved together (pydantic
# pins pydantic-core exactly, and typing-extensions/attrs there may be older than they need); onnxruntime-gpu and
# onnxconverter-common without theirs (numpy, onnx, protobuf are there, and must not be shadowed).
RESOLVED=(pydantic jsonschema)
NO_DEPS=(onnxruntime-gpu==1.31.1 onnxconverter-common)
# Installed there only when the machine's own version misses ampconfig's pin (checked by `install`).
EXTRAS=(typer rich PyYAML ml_dtypes onnx-ir)
PLATFORM_ARGS=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

build() {
  local stage=/tmp/ampconfig-bundle
  rm -rf "$stage" /tmp/ampconfig-bundle.tar /tmp/ampconfig-bpart* "$REPO"/.gpu[0-9]
  mkdir -p "$stage/extra"
  python3 -m pip download -q --no-deps "${PLATFORM_ARGS[@]}" -d "$stage" "${NO_DEPS[@]}"
  python3 -m pip download -q "${PLATFORM_ARGS[@]}" -d "$stage" "${RESOLVED[@]}"
  python3 -m pip download -q --no-deps "${PLATFORM_ARGS[@]}" -d "$stage/extra" "${EXTRAS[@]}"
  python3 -m pip wheel -q --no-deps "$REPO" -w "$stage"
  ls -l "$stage" "$stage/extra" | awk 'NF > 5 {printf "%10d  %s\n", $5, $NF}'
  tar cf /tmp/ampconfig-bundle.tar -C "$stage" .
  split -b "$PART_BYTES" -d -a 1 /tmp/ampconfig-bundle.tar /tmp/ampconfig-bpart
  local part n
  for part in /tmp/ampconfig-bpart*; do
    n=${part##*bpart}
    mkdir -p "$REPO/.gpu$n"
    printf '*\n' > "$REPO/.gpu$n/.gitignore"  # ignored without touching the (shared) .git/info/exclude
    mv "$part" "$REPO/.gpu$n/bpart$n"
    git -C "$REPO" check-ignore -q ".gpu$n/bpart$n" || { echo "error: .gpu$n is not ignored by git" >&2; exit 1; }
  done
  echo "tar: $(stat -c %s /tmp/ampconfig-bundle.tar) bytes ($(sha256sum /tmp/ampconfig-bundle.tar | cut -c1-16))"
  for part in "$REPO"/.gpu[0-9]/bpart*; do echo "${part#"$REPO"/}  $(stat -c %s "$part") bytes"; done
  rm -f /tmp/ampconfig-bundle.tar
}

install() {
  local bundle=/root/b site=/tmp/site
  rm -rf "$bundle" "$site" && mkdir -p "$bundle" "$site"
  cat /root/bp/bpart* | tar xf - -C "$bundle"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$bundle"/*.whl
  # ampconfig's pins for what the machine already has (the wheel was installed without its dependencies).
  local needed
  needed=$(PYTHONPATH=$site python3 - "$REPO/pyproject.toml" <<'EOF'
import importlib.metadata as metadata
import re
import sys

from packaging.requirements import Requirement

text = open(sys.argv[1]).read()
block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
for line in re.findall(r'^\s*"([^"]+)"', block, re.M):
    requirement = Requirement(line)
    if requirement.marker is not None and not requirement.marker.evaluate():
        continue
    try:
        have = metadata.version(requirement.name)
    except metadata.PackageNotFoundError:
        have = None
    ok = have is not None and requirement.specifier.contains(have, prereleases=True)
    print(f"pin {requirement}: have {have} -> {'ok' if ok else 'MISSING'}", file=sys.stderr)
    if not ok:
        print(requirement.name.lower().replace("-", "_"))
EOF
  )
  local name wheel
  for name in $needed; do
    wheel=$(ls "$bundle"/extra/*.whl 2>/dev/null | grep -i "/${name}-" || true)
    if [ -n "$wheel" ]; then
      echo "installing extra $wheel"
      python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheel"
    else
      echo "no bundled wheel for $name (see the pin line above)"
    fi
  done
  # shellcheck source=gpu_env.sh
  . "$REPO/benchmarks/gpu_env.sh"
  python3 -c "import onnxruntime as o, ampconfig; print('onnxruntime', o.__version__, o.__file__, o.get_available_providers()); print('ampconfig', ampconfig.__file__)"
}

case "${1:-}" in
  build) build ;;
  install) install ;;
  *) echo "usage: $0 build|install" >&2; exit 2 ;;
esac
