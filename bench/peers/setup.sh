#!/usr/bin/env bash
# Installs the peers that bench/peers/hf_adamw_peers.py compares lazytensor with.
# Idempotent: each step checks first and skips what is already there.
#
#   system /usr/bin/python3 : Debian's python3-torch (PyTorch 1.13, eager + Lazy Tensor Core)
#   .venv-peers             : current torch (PyPI), jax[cpu], optax, DeepSpeed (its CPU Adam op
#                             JIT-built here with ninja, once, into ~/.cache/torch_extensions)
#   .venv-xla               : torch-xla and the torch release it was built against
#   .venv-ipex              : Intel Extension for PyTorch and the torch release it requires
#
# Nothing is pip-installed into the system Python. A peer that cannot be installed is
# reported here and, later, in the driver's table; it does not stop the rest.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SYS_PY=/usr/bin/python3
PEERS_VENV=$ROOT/.venv-peers
XLA_VENV=$ROOT/.venv-xla
IPEX_VENV=$ROOT/.venv-ipex
status=0

say() { echo "setup.sh: $*"; }

# --- Debian packages ----------------------------------------------------------------
# python3-dev: torch.compile's C++ backend (Inductor) includes Python.h.
apt_pkgs=(python3-torch python3-numpy python3-venv python3-dev)
missing=()
for p in "${apt_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    say "apt-get install ${missing[*]}"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" \
        || { say "apt-get install failed"; status=1; }
else
    say "Debian packages present"
fi

make_venv() {  # $1: path
    [[ -x $1/bin/python ]] && return 0
    say "creating $1"
    "$SYS_PY" -m venv "$1" && "$1/bin/python" -m pip install -q --upgrade pip
}

# --- current torch + JAX --------------------------------------------------------------
if make_venv "$PEERS_VENV"; then
    if "$PEERS_VENV/bin/python" -c "import torch, jax, optax, numpy, transformers, safetensors" 2>/dev/null; then
        say ".venv-peers: torch, jax, optax, transformers present"
    else
        # Only the default PyPI index is reachable, so this is the CUDA build of torch;
        # it runs on the CPU all the same. transformers and safetensors: the BERT references
        # (bench/reference/minilm_reference.py, train_peers.py --mode check-hf).
        say ".venv-peers: pip install torch jax[cpu] optax numpy transformers safetensors"
        "$PEERS_VENV/bin/python" -m pip install -q torch "jax[cpu]" optax numpy transformers \
            safetensors || { say ".venv-peers: pip install failed"; status=1; }
    fi
else
    say "could not create $PEERS_VENV"; status=1
fi

# --- DeepSpeed (CPU Adam) -----------------------------------------------------------------
# DeepSpeedCPUAdam JIT-compiles its C++ op (torch.utils.cpp_extension, ninja, g++, Python.h)
# on first use; building it here keeps that minute out of `make peers` and reports a failure
# now. The op is cached per torch version, so a second run only loads it.
if [[ -x $PEERS_VENV/bin/python ]]; then
    if "$PEERS_VENV/bin/python" -c "import deepspeed, ninja" >/dev/null 2>&1; then
        say ".venv-peers: deepspeed present"
    else
        say ".venv-peers: pip install deepspeed ninja"
        "$PEERS_VENV/bin/python" -m pip install -q deepspeed ninja \
            || { say ".venv-peers: pip install deepspeed failed"; status=1; }
    fi
    # The venv's bin/ on PATH: ninja from PyPI is found there when the system has none.
    if PATH="$PEERS_VENV/bin:$PATH" "$PEERS_VENV/bin/python" -c "
from deepspeed.ops.op_builder import CPUAdamBuilder
CPUAdamBuilder().load(verbose=False)" >/dev/null 2>&1; then
        say ".venv-peers: DeepSpeed cpu_adam op built"
    else
        say ".venv-peers: DeepSpeed cpu_adam op could not be built (see the peers table)"
        status=1
    fi
fi

# --- torch-xla --------------------------------------------------------------------------
# torch-xla's wheel does not pin torch, but only runs with the torch release it was built
# against (same major.minor), so that torch is installed beside it in its own venv.
if make_venv "$XLA_VENV"; then
    if "$XLA_VENV/bin/python" -c "import torch, torch_xla, numpy" 2>/dev/null; then
        say ".venv-xla: torch-xla present"
    elif "$XLA_VENV/bin/python" -m pip install -q torch-xla numpy; then
        xla_ver=$("$XLA_VENV/bin/python" -c "import importlib.metadata as m; print(m.version('torch_xla'))")
        torch_spec="torch~=${xla_ver%.*}.0"
        say ".venv-xla: torch-xla $xla_ver, pip install $torch_spec"
        "$XLA_VENV/bin/python" -m pip install -q "$torch_spec" \
            || { say ".venv-xla: pip install $torch_spec failed"; status=1; }
    else
        say ".venv-xla: torch-xla could not be installed; the peers table will say so"
        status=1
    fi
else
    say "could not create $XLA_VENV"; status=1
fi

# --- Intel Extension for PyTorch ------------------------------------------------------------
# IPEX's wheel does not pin torch either, but refuses at import any torch other than the
# major.minor it was built against; its newest release on PyPI is older than the torch
# in .venv-peers, so it gets its own venv with that torch, as torch-xla does.
if make_venv "$IPEX_VENV"; then
    if "$IPEX_VENV/bin/python" -c "import torch, intel_extension_for_pytorch, numpy" 2>/dev/null; then
        say ".venv-ipex: intel-extension-for-pytorch present"
    elif "$IPEX_VENV/bin/python" -m pip install -q intel-extension-for-pytorch numpy; then
        ipex_ver=$("$IPEX_VENV/bin/python" -c "import importlib.metadata as m; print(m.version('intel_extension_for_pytorch'))")
        ipex_ver=${ipex_ver%%+*}
        torch_spec="torch~=${ipex_ver%.*}.0"
        say ".venv-ipex: intel-extension-for-pytorch $ipex_ver, pip install $torch_spec"
        "$IPEX_VENV/bin/python" -m pip install -q "$torch_spec" \
            || { say ".venv-ipex: pip install $torch_spec failed"; status=1; }
        "$IPEX_VENV/bin/python" -c "import intel_extension_for_pytorch" >/dev/null 2>&1 \
            || { say ".venv-ipex: intel_extension_for_pytorch does not import (see the peers table)"; status=1; }
    else
        say ".venv-ipex: intel-extension-for-pytorch could not be installed (no wheel for" \
            "Python $("$SYS_PY" -c 'import platform; print(platform.python_version())') on" \
            "$(uname -m)?); the peers table will say so"
        status=1
    fi
else
    say "could not create $IPEX_VENV"; status=1
fi

df -h "$ROOT" | tail -1 | awk '{print "setup.sh: disk free after setup: " $4}'
# A missing peer is reported in the table, so setup problems do not fail `make peers`.
if ((status)); then say "finished with problems (see above)"; else say "done"; fi
exit 0
