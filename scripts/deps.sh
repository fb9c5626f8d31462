#!/usr/bin/env bash
# Installs what this machine lacks for PCN Lab, idempotently, and says what it did.
#   Debian/Ubuntu packages, p4c + BMv2 (p4lang's Ubuntu packages), the project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "deps: $*"; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
. /etc/os-release 2>/dev/null || true

# PCN Lab needs Python 3.11 or newer from the system (the venv sees apt's Mininet and thrift through it):
# Debian 12 has 3.11, Ubuntu 24.04 3.12; Ubuntu 22.04's is 3.10, and is refused here before anything is
# installed.
SYSPY=/usr/bin/python3
if [ -x "$SYSPY" ] && ! "$SYSPY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  say "${PRETTY_NAME:-this system} has Python $("$SYSPY" -c 'import platform; print(platform.python_version())'); PCN Lab needs 3.11 or newer: use Ubuntu 24.04 or Debian 12 (or the VM: make up)"
  exit 1
fi

# --- system packages -------------------------------------------------------------------------
pkgs="mininet bridge-utils iperf3 iputils-ping tcpdump ethtool iproute2 nftables procps util-linux python3-venv python3-thrift python3-dev gcc make podman runc debootstrap debian-archive-keyring"
# podman runs a job's ranks in containers (image:); runc is its runtime on cgroup v1 (crun, podman's
# default, refuses hybrid mode); debootstrap and Debian's keyring make the worker image's base (make image).
# Headless Chromium loads `pcnlab view`'s HTML in the tests and the benchmark (tests/experiments/test_view_bmv2.py):
# Debian's package is chromium; Ubuntu's is chromium-browser (which installs the snap).
if [ "${ID:-}" = ubuntu ]; then pkgs="$pkgs chromium-browser"; else pkgs="$pkgs chromium"; fi
# tshark runs the generated Wireshark dissector in the tests (tests/controller/test_wireshark_dissector.py).
pkgs="$pkgs tshark"
# nftables closes BMv2's thrift ports to everything but loopback during a run (topologies/control_ports.py).
missing=$(for p in $pkgs; do dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"; done | tr '\n' ' ')
if [ -n "${missing// /}" ]; then
  say "installing Debian packages: $missing"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >/dev/null
  $SUDO apt-get install -y -q $missing >/tmp/pcnlab-apt.log 2>&1 || { say "apt-get failed, see /tmp/pcnlab-apt.log"; exit 1; }
else
  say "Debian packages present"
fi

# --- p4c and BMv2 ----------------------------------------------------------------------------
if command -v p4c >/dev/null && command -v simple_switch_grpc >/dev/null; then
  say "p4c $(p4c --version 2>&1 | tail -1 | awk '{print $2}') and $(simple_switch_grpc --version 2>&1 | head -1) present"
elif [ "${ID:-}" = ubuntu ] && [ "${VERSION_ID:-}" = 24.04 ]; then
  say "installing p4c and BMv2 from p4lang's Ubuntu packages"
  repo="https://download.opensuse.org/repositories/home:/p4lang/xUbuntu_${VERSION_ID}"
  echo "deb ${repo}/ /" | $SUDO tee /etc/apt/sources.list.d/home-p4lang.list >/dev/null
  curl -fsSL "${repo}/Release.key" | gpg --dearmor | $SUDO tee /etc/apt/trusted.gpg.d/home-p4lang.gpg >/dev/null
  $SUDO apt-get update -q >/dev/null
  $SUDO DEBIAN_FRONTEND=noninteractive apt-get install -y -q p4lang-p4c p4lang-bmv2 >>/tmp/pcnlab-apt.log 2>&1 \
    || { say "p4lang packages failed to install, see /tmp/pcnlab-apt.log"; exit 1; }
elif [ -x ../shared/p4tools/install ]; then
  say "no package source for p4c/BMv2 on ${PRETTY_NAME:-this system}; installing ../shared/p4tools (built from p4lang's sources)"
  $SUDO ../shared/p4tools/install
else
  say "no package source for p4c/BMv2 on ${PRETTY_NAME:-this system}: P4 tests will skip (use the Vagrant VM: make up)"
fi

# --- the project's virtualenv ------------------------------------------------------------------
# Debian's python3 sees apt's Mininet and thrift; the venv keeps them visible.
if [ ! -x .venv/bin/python ]; then
  say "creating .venv from $SYSPY (--system-site-packages)"
  $SYSPY -m venv --system-site-packages .venv
fi
stamp=.venv/.pcnlab-deps
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && .venv/bin/python -c "import torch, finsy, scapy, yaml, pandas, matplotlib, scipy, pyarrow, sklearn, pytest, bokeh, nbclient, ipykernel, ray, pcnlab" 2>/dev/null; then
  say ".venv up to date"
else
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  # PyTorch first, so the project's torch>=2.2 finds it there. PyPI's Linux wheel is the CUDA build (gigabytes):
  # without an NVIDIA driver, PyTorch's CPU-only index instead. PCNLAB_TORCH_INDEX overrides the choice.
  if .venv/bin/python -c "import torch" 2>/dev/null; then
    say "PyTorch $(.venv/bin/python -c 'import torch; print(torch.__version__)') present in .venv"
  else
    torch_index="${PCNLAB_TORCH_INDEX:-}"
    if [ -z "$torch_index" ] && ! command -v nvidia-smi >/dev/null && [ ! -e /proc/driver/nvidia/version ]; then
      torch_index=https://download.pytorch.org/whl/cpu
    fi
    say "installing PyTorch 2.13.0 into .venv from ${torch_index:-the default index (CUDA build: an NVIDIA driver is here)}"
    .venv/bin/python -m pip install -q ${torch_index:+--index-url "$torch_index"} "torch==2.13.0"
  fi
  say "installing the project and its Python packages into .venv (finsy, scapy, pyyaml, pandas, matplotlib, scipy, pyarrow, scikit-learn, bokeh, pytest, nbclient, ipykernel; ray for sweeps over several machines)"
  .venv/bin/python -m pip install -q -e ".[dev,cluster]"
  touch "$stamp"
fi
say "done"
