#!/usr/bin/env bash
# Builds the default worker image (localhost/pcnlab-worker: Python 3.11, PyTorch CPU, numpy) without
# any image registry, and says how long each step took and how big the image is. It holds no PCN Lab
# code: a container mounts this checkout read-only (workloads/containers.py), so code changes need no
# new image.
#   1. the base: Debian bookworm minbase + python3, python3-venv, iproute2 by debootstrap from Debian's
#      archive, `podman import`ed as localhost/pcnlab-base:bookworm (kept: later builds reuse it;
#      PCNLAB_IMAGE_REBUILD=1 makes it again);
#   2. the wheels, collected here by this machine's pip into the build context: torch==2.13.0+cpu from
#      pip's configured sources (a local wheel folder or index), else from PyTorch's CPU index
#      (PCNLAB_TORCH_INDEX overrides it); its dependencies and numpy from the configured indexes;
#   3. `podman build --network none` of containers/Containerfile: the image's pip sees only those wheels.
# Needs root, podman, runc (cgroup v1) or crun (v2), debootstrap: `make deps`.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "image: $*"; }
t0=$(date +%s)
[ "$(id -u)" -eq 0 ] || { say "needs root (podman import/build as root): sudo $0"; exit 1; }
for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || { say "$tool is not installed: make deps"; exit 1; }
done
PY=.venv/bin/python
[ -x "$PY" ] || { say ".venv is missing: make deps"; exit 1; }
eval "$("$PY" -c "from pcnlab.workloads.containers import shell_vars; print(shell_vars())")"   # PODMAN_*, DEFAULT_IMAGE, BASE_IMAGE
command -v "$PODMAN_RUNTIME" >/dev/null || { say "$PODMAN_RUNTIME is not installed ($PODMAN_WHY): make deps"; exit 1; }
pod() { podman "${PODMAN_GLOBAL[@]}" "$@"; }
say "podman runtime: $PODMAN_RUNTIME ($PODMAN_WHY)"

work=$(mktemp -d /var/tmp/pcnlab-image.XXXXXX)
trap 'rm -rf "$work"' EXIT

# --- 1. the base image ------------------------------------------------------------------------
if [ "${PCNLAB_IMAGE_REBUILD:-0}" != 1 ] && pod image exists "$BASE_IMAGE"; then
  say "base $BASE_IMAGE present (PCNLAB_IMAGE_REBUILD=1 makes it again)"
else
  mirror="${PCNLAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
  keyring=(); [ -f /usr/share/keyrings/debian-archive-keyring.gpg ] && keyring=(--keyring /usr/share/keyrings/debian-archive-keyring.gpg)
  say "debootstrap bookworm (minbase + python3, python3-venv, iproute2) from $mirror"
  debootstrap --variant=minbase --include=python3,python3-venv,iproute2 "${keyring[@]}" \
    bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -5 "$work/debootstrap.log"; say "debootstrap failed (log above)"; exit 1; }
  rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/* "$work"/rootfs/var/log/*.log
  tar -C "$work/rootfs" --numeric-owner -c . | pod import --quiet - "$BASE_IMAGE" >/dev/null
  rm -rf "$work/rootfs"
  say "base $BASE_IMAGE imported after $(( $(date +%s) - t0 )) s"
fi

# --- 2. the wheels ------------------------------------------------------------------------------
t1=$(date +%s)
ctx="$work/context"; wheels="$ctx/wheels"; mkdir -p "$wheels"
# The image runs Debian bookworm's Python 3.11 on x86-64 glibc 2.36, whatever this machine runs.
target=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none
        --platform manylinux2014_x86_64)
for minor in $(seq 17 36); do target+=(--platform "manylinux_2_${minor}_x86_64"); done
pip=("$PY" -m pip -q --disable-pip-version-check)
if "${pip[@]}" download --no-deps "${target[@]}" -d "$wheels" "torch==2.13.0+cpu" 2>"$work/pip.log"; then
  say "torch 2.13.0+cpu from pip's configured sources"
else
  index="${PCNLAB_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
  say "torch 2.13.0+cpu from $index"
  "${pip[@]}" download --no-deps "${target[@]}" --index-url "$index" -d "$wheels" "torch==2.13.0+cpu"
fi
torch_wheel=$(ls "$wheels"/torch-*.whl)
"${pip[@]}" download "${target[@]}" -d "$wheels" "$torch_wheel" numpy 2> >(grep -v "^WARNING: Location .* is ignored" >&2)
printf '%s\n' "torch==2.13.0+cpu" numpy >"$wheels/requirements.txt"
say "wheels: $(ls "$wheels" | grep -c whl) ($(du -sh "$wheels" | cut -f1)) after $(( $(date +%s) - t1 )) s"

# --- 3. the image -------------------------------------------------------------------------------
t2=$(date +%s)
cp containers/Containerfile "$ctx/Containerfile"
previous=$(pod image inspect --format '{{.Id}}' "$DEFAULT_IMAGE" 2>/dev/null || true)
pod build --quiet --layers=false --network none --runtime "$PODMAN_RUNTIME" "${PODMAN_ULIMITS[@]}" \
  --build-arg BASE="$BASE_IMAGE" -t "$DEFAULT_IMAGE" -f "$ctx/Containerfile" "$ctx" >"$work/build.log" 2>&1 \
  || { tail -15 "$work/build.log"; say "podman build failed (log above)"; exit 1; }
current=$(pod image inspect --format '{{.Id}}' "$DEFAULT_IMAGE")
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then   # the previous build, now untagged
  pod rmi "$previous" >/dev/null 2>&1 || true
fi
size=$(pod image inspect --format '{{.Size}}' "$DEFAULT_IMAGE")
say "built $DEFAULT_IMAGE in $(( $(date +%s) - t2 )) s: $(( size / 1000000 )) MB; total $(( $(date +%s) - t0 )) s"
