#!/usr/bin/env bash
# Installs the peers that bench/peers/hf_adamw_peers.py compares lazytensor with.
# Idempotent: each step checks first and skips what is already there.
#
#   system /usr/bin/python3 : Debian's python3-torch (PyTorch 1.13, eager + Lazy Tensor Core)
#   .venv-peers             : current torch (PyPI), jax[cpu], optax
#   .venv-xla               : torch-xla and the torch release it was built against
#
# Nothing is pip-installed into the system Python. A peer that cannot be installed is
# reported here and, later, in the driver's table; it does not stop the rest.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SYS_PY=/usr/bin/python3
PEERS_VENV=$ROOT/.venv-peers
XLA_VENV=$ROOT/.venv-xla
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

df -h "$ROOT" | tail -1 | awk '{print "setup.sh: disk free after setup: " $4}'
# A missing peer is reported in the table, so setup problems do not fail `make peers`.
if ((status)); then say "finished with problems (see above)"; else say "done"; fi
exit 0
