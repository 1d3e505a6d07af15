#!/usr/bin/env python3
"""The HF AdamW step (transformers 4.6.0, correct_bias=True) in other frameworks, against
lazytensor: agreement on lazytensor's tiny dump, then median step time on a BERT model's
parameter shapes. Prints a Markdown table; --json writes the rows. Other optimizers that a
CPU user would reach for (torch.optim.AdamW, optax, DeepSpeedCPUAdam, IPEX's optimizers, in
fp32 and bf16) are timed on the same shapes, as different algorithms.

Each peer runs in its own subprocess, with a timeout and a memory watchdog, so a peer that
crashes, hangs or runs out of memory becomes a row saying so, not the end of the table.
Run with a Python that has numpy (Debian's /usr/bin/python3 after setup.sh).
"""
import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import common

PEERS_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(PEERS_DIR))
SYS_PY = "/usr/bin/python3"
PEERS_PY = os.path.join(ROOT, ".venv-peers", "bin", "python")
# The PyTorch device's environment (`make torch-env test-torch`): PyTorch 2.15 from PyPI with
# lazytensor-torch installed.
TORCH_PY = os.path.join(ROOT, ".venv-torch", "bin", "python")
XLA_PY = os.path.join(ROOT, ".venv-xla", "bin", "python")
IPEX_PY = os.path.join(ROOT, ".venv-ipex", "bin", "python")
POLICIES = ("argument", "cached", "uncached", "constant")
GIB = 1 << 30


@dataclass
class Peer:
    name: str
    variant: str
    python: str
    script: str
    arg: str           # the --variant the script gets
    hf: bool = True    # False: a different algorithm, timed only
    differs: str = "decoupled weight decay"  # how, where hf is False


PEERS = [
    Peer("PyTorch (Debian)", "eager, HF loop", SYS_PY, "peer_torch.py", "hf"),
    Peer("PyTorch (Debian)", "Lazy Tensor Core (TS backend), HF loop", SYS_PY,
         "peer_torch_lazy.py", "hf"),
    Peer("PyTorch (PyPI)", "eager, HF loop", PEERS_PY, "peer_torch.py", "hf"),
    Peer("lazytensor device", "PyTorch 2.15, HF loop, scalars=argument", TORCH_PY,
         "peer_torch_device.py", "argument"),
    Peer("lazytensor device", "PyTorch 2.15, HF loop, scalars=uncached", TORCH_PY,
         "peer_torch_device.py", "uncached"),
    Peer("PyTorch 2.15 (.venv-torch)", "eager, HF loop", TORCH_PY, "peer_torch.py", "hf"),
    Peer("PyTorch (PyPI)", "torch.optim.AdamW foreach=True", PEERS_PY, "peer_torch.py",
         "foreach", hf=False),
    Peer("PyTorch (PyPI)", "torch.optim.AdamW fused=True", PEERS_PY, "peer_torch.py",
         "fused", hf=False),
    Peer("PyTorch (PyPI)", "torch.optim.AdamW fused=True, bf16", PEERS_PY, "peer_torch.py",
         "fused-bf16", hf=False),
    Peer("PyTorch (PyPI)", "torch.compile, HF step (t a Python int)", PEERS_PY,
         "peer_torch_compile.py", "hf"),
    Peer("PyTorch (PyPI)", "torch.compile, step size a 0-d tensor", PEERS_PY,
         "peer_torch_compile.py", "size-tensor"),
    Peer("JAX", "jit, HF step, donated", PEERS_PY, "peer_jax.py", "hf"),
    Peer("JAX", "optax.adamw, jit, donated", PEERS_PY, "peer_jax.py", "optax", hf=False),
    Peer("torch-xla", "PJRT CPU, HF loop + sync", XLA_PY, "peer_torch_xla.py", "hf"),
    Peer("DeepSpeed", "DeepSpeedCPUAdam adamw_mode=True, fp32", PEERS_PY, "peer_deepspeed.py",
         "fp32", hf=False),
    Peer("DeepSpeed", "DeepSpeedCPUAdam adamw_mode=True, bf16 params, fp32 moments", PEERS_PY,
         "peer_deepspeed.py", "bf16", hf=False),
    Peer("DeepSpeed", "DeepSpeedCPUAdam adamw_mode=True, bf16 params and moments", PEERS_PY,
         "peer_deepspeed.py", "bf16-states", hf=False),
    Peer("IPEX", "ipex.optimize(AdamW, fuse_update_step=True), fp32", IPEX_PY, "peer_ipex.py",
         "adamw-fp32", hf=False),
    Peer("IPEX", "ipex.optimize(AdamW, fuse_update_step=True), bf16", IPEX_PY, "peer_ipex.py",
         "adamw-bf16", hf=False),
    Peer("IPEX", "ipex.optimize(Adam, fuse_update_step=True), fp32", IPEX_PY, "peer_ipex.py",
         "adam-fp32", hf=False, differs="Adam: L2 weight decay"),
    Peer("IPEX", "ipex.optimize(Adam, fuse_update_step=True), bf16 split master", IPEX_PY,
         "peer_ipex.py", "adam-bf16", hf=False, differs="Adam: L2 weight decay"),
]


# ---- machine -----------------------------------------------------------------------------

def meminfo_bytes(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def machine():
    cpu = platform.processor() or "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu, "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
            "memory_gib": round(meminfo_bytes("MemTotal") / GIB, 1),
            "available_gib": round(meminfo_bytes("MemAvailable") / GIB, 1),
            "python": platform.python_version(), "kernel": platform.release()}


# ---- subprocesses ------------------------------------------------------------------------

def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_busy_seconds():
    """CPU seconds all processes on the machine have used since boot (from /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_limited(cmd, timeout, mem_limit, env=None):
    """Runs cmd in its own process group; kills the group past `timeout` seconds or when
    the process's RSS passes `mem_limit` bytes (before the kernel's OOM killer picks some
    other process on this shared machine). Returns {failure or None, peak_rss, output,
    other_cpu}: other_cpu is the share of all CPUs that processes other than cmd used
    meanwhile, i.e. how far the machine was from quiet."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=PEERS_DIR,
                                env=env, start_new_session=True)
        start, busy_start, stopped = time.monotonic(), cpu_busy_seconds(), None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if stopped is None:
                if time.monotonic() - start > timeout:
                    stopped = f"timed out after {timeout:.0f} s"
                elif rss_bytes(proc.pid) > mem_limit:
                    stopped = f"out of memory: RSS passed the {mem_limit / GIB:.1f} GiB limit"
                if stopped:
                    os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.2)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        own = usage.ru_utime + usage.ru_stime
        other = (cpu_busy_seconds() - busy_start - own) / (
            (time.monotonic() - start) * len(os.sched_getaffinity(0)))
        log.seek(0)
        output = log.read().decode(errors="replace")
    failure = stopped
    if failure is None and proc.returncode == -signal.SIGKILL:
        failure = "killed by SIGKILL (likely the kernel's OOM killer)"
    elif failure is None and proc.returncode != 0:
        last = output.strip().splitlines()[-1:] or ["no output"]
        failure = f"exit code {proc.returncode}: {last[0][:200]}"
    return {"failure": failure, "peak_rss": usage.ru_maxrss * 1024, "output": output,
            "other_cpu": round(max(other, 0.0), 3)}


def run_peer(peer, mode, data, steps, args):
    """Runs one peer script once; returns its result dict (status "ok" or a reason)."""
    if not os.path.exists(peer.python):
        return {"status": "not installed", "error": f"{peer.python} missing: run bench/peers/setup.sh"}
    with tempfile.NamedTemporaryFile(suffix=".json") as res:
        cmd = [peer.python, peer.script, "--mode", mode, "--data", data, "--variant", peer.arg,
               "--result", res.name, "--steps", str(steps)]
        env = dict(os.environ, JAX_PLATFORMS="cpu", PJRT_DEVICE="CPU")
        run = run_limited(cmd, args.timeout, args.mem_limit_gib * GIB, env)
        try:
            with open(res.name) as f:
                result = json.load(f)
        except ValueError:
            result = {"status": "failed", "error": run["failure"] or "no result written"}
    if run["failure"] and result.get("status") == "ok":
        result = {"status": "failed", "error": run["failure"]}
    if result["status"] != "ok":
        done = re.findall(r"^step (\d+): ([\d.]+) s$", run["output"], re.M)
        if done:
            result["error"] += (f" (after {len(done)} steps; step times "
                                f"{', '.join(sec for _, sec in done)} s)")
    result["peak_rss_gib"] = round(run["peak_rss"] / GIB, 2)
    result["other_cpu"] = run["other_cpu"]
    if result["status"] != "ok" and args.verbose:
        print(run["output"][-3000:], file=sys.stderr)
    return result


# ---- lazytensor ----------------------------------------------------------------------------

def lazytensor_shapes(binary, model):
    out = subprocess.run([binary, "params", "--model", model], capture_output=True, text=True,
                         check=True, timeout=120)
    return [(t["name"], t["shape"]) for t in json.loads(out.stdout)["tensors"]]


def lazytensor_dump(binary, policy, directory, args):
    """lazytensor's 3-step tiny dump under scalar policy `policy`."""
    cmd = [binary, "adamw", "--model", "tiny", "--steps", "3", "--scalars", policy,
           "--dump", directory]
    # A tiny dump takes well under a second: do not wait a whole peer timeout for a hang.
    run = run_limited(cmd, min(args.timeout, 120), args.mem_limit_gib * GIB)
    return run["failure"]


def lazytensor_row(binary, policy, dump_failure, dump_dir, work, args):
    row = {"peer": "lazytensor", "variant": f"scalars={policy}", "hf": True}
    if dump_failure:
        row["agreement"] = {"status": "failed", "error": f"dump: {dump_failure}"}
    else:
        # lazytensor's own output against the float64 numpy reference of the HF step.
        manifest, params, grads, after = common.load_dump(dump_dir)
        ref = common.reference_adamw(params, grads, common.hparams_of(manifest),
                                     int(manifest["steps"]))
        row["agreement"] = {"status": "ok", "agreement": common.compare(after, ref)}
    out = os.path.join(work, f"lazytensor-{policy}.json")
    cmd = [binary, "adamw", "--model", args.model, "--steps", str(args.steps + 1),
           "--scalars", policy, "--json", out]
    run = run_limited(cmd, args.timeout, args.mem_limit_gib * GIB)
    if run["failure"]:
        row["timing"] = {"status": "failed", "error": run["failure"],
                         "peak_rss_gib": round(run["peak_rss"] / GIB, 2),
                         "other_cpu": run["other_cpu"]}
        return row
    try:
        with open(out) as f:
            report = json.load(f)
        report["step_seconds_median"]
    except (OSError, ValueError, KeyError) as e:
        row["timing"] = {"status": "failed", "error": f"bad --json output: {type(e).__name__} {e}"}
        return row
    # lazytensor leaves out counters never touched: those are 0.
    counters = report.get("counters_after_first_step", {})
    row["timing"] = {"status": "ok", "step_seconds_median": report["step_seconds_median"],
                     "first_step_seconds": (report.get("step_seconds") or [None])[0],
                     "peak_rss_gib": round(run["peak_rss"] / GIB, 2),
                     "other_cpu": run["other_cpu"],
                     "transfers": counters.get("TransferToDeviceSync", 0),
                     "compiles": {"uncached": counters.get("UncachedCompile", 0),
                                  "cached": counters.get("CachedCompile", 0)},
                     "counters": counters, "report": report}
    return row


# ---- table -----------------------------------------------------------------------------------

def fmt_seconds(x):
    return "-" if x is None else f"{x:.4g}"


def fmt_agreement(row, dump_note):
    if not row["hf"]:
        return f"n/a: different algorithm ({row.get('differs', 'decoupled weight decay')})"
    check = row.get("agreement")
    if check is None:
        return f"n/a: {dump_note}"
    if check["status"] != "ok":
        return f"{check['status']}: {check.get('error', '')}"
    a = check["agreement"]
    if a["max_abs"] is None:
        return f"DIFFERS: {a['error']}"
    verdict = "ok" if a["ok"] else "DIFFERS"
    return f"{verdict} (max abs {a['max_abs']:.1e}, max rel {a['max_rel']:.1e})"


def fmt_compiles(c):
    if not c or c.get("uncached") is None:
        return "-"
    return f"{c['uncached']} new" + ("" if c.get("cached") is None else f", {c['cached']} cached")


def table(rows, baseline, dump_note):
    head = ["peer", "variant", "median step (s)", "vs lazytensor", "first step (s)",
            "agreement", "transfers*", "compiles*", "peak RSS (GiB)", "other CPU", "notes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        t = row["timing"]
        ok = t["status"] == "ok"
        median = t.get("step_seconds_median") if ok else None
        ratio = f"{median / baseline:.2f}x" if median and baseline else "-"
        notes = t.get("notes", "") if ok else f"{t['status']}: {t.get('error', '')}"
        peer = row["peer"] + (f" {t['version']}" if t.get("version") else "")
        cells = [peer, row["variant"], fmt_seconds(median), ratio,
                 fmt_seconds(t.get("first_step_seconds")), fmt_agreement(row, dump_note),
                 "-" if t.get("transfers") is None else str(t["transfers"]),
                 fmt_compiles(t.get("compiles")), str(t.get("peak_rss_gib", "-")),
                 "-" if t.get("other_cpu") is None else f"{t['other_cpu']:.0%}", notes]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def cached_shapes(directory):
    """[[name, shape]] of the timing data already in `directory`, or None."""
    try:
        with open(os.path.join(directory, "manifest.json")) as f:
            return [[t["name"], t["shape"]] for t in json.load(f)["tensors"]]
    except (OSError, ValueError, KeyError):
        return None


# ---- main ------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert-base", choices=sorted(common.BERT_CONFIGS))
    ap.add_argument("--steps", type=int, default=10, help="timed steps, after one warm-up")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per peer run")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--lazytensor", default=os.path.join(ROOT, "build", "release", "lazytensor"))
    ap.add_argument("--dump", help="use this tiny dump for agreement instead of making one")
    ap.add_argument("--shapes-from-builtin", action="store_true",
                    help="BERT shapes from this script, not from `lazytensor params`")
    ap.add_argument("--peers", help="comma-separated substrings: run only matching peers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", help="timing data cache (default /tmp/lazytensor-peers/...)")
    ap.add_argument("--mem-limit-gib", type=float,
                    default=round(0.85 * meminfo_bytes("MemAvailable") / GIB, 1),
                    help="kill a peer whose RSS passes this (default 85%% of available)")
    ap.add_argument("--verbose", action="store_true", help="print failing peers' output")
    args = ap.parse_args()

    info = machine()
    have_lt = os.access(args.lazytensor, os.X_OK)
    print(f"# HF AdamW step: peers vs lazytensor\n\nMachine: {info['cpu']}, {info['cores']} cores "
          f"({info['usable_cores']} usable), {info['memory_gib']} GiB memory "
          f"({info['available_gib']} GiB available at start), Linux {info['kernel']}\n")

    shapes, shapes_source = None, "built-in BERT config"
    if have_lt and not args.shapes_from_builtin:
        try:
            shapes, shapes_source = lazytensor_shapes(args.lazytensor, args.model), "`lazytensor params`"
        except (subprocess.SubprocessError, ValueError, KeyError) as e:
            shapes_source += f" (`lazytensor params` failed: {type(e).__name__})"
    shapes = shapes or common.bert_shapes(args.model)
    nparams = sum(common.numel(s) for _, s in shapes)
    print(f"Model: {args.model}, {len(shapes)} tensors, {nparams:,} parameters (shapes from "
          f"{shapes_source}); median of {args.steps} steps after 1 warm-up step; "
          f"memory limit per peer {args.mem_limit_gib} GiB; timeout {args.timeout:.0f} s; "
          f"1-minute load average at start {os.getloadavg()[0]:.2f}.\n",
          flush=True)

    data = args.data_dir or f"/tmp/lazytensor-peers/{args.model}-seed{args.seed}"
    if cached_shapes(data) != [[n, list(s)] for n, s in shapes]:
        print(f"writing timing data to {data}", file=sys.stderr)
        common.write_timing_data(data, shapes, args.seed)

    work = tempfile.mkdtemp(prefix="lazytensor-peers-")
    rows = []
    if have_lt:
        for policy in POLICIES:
            print(f"running lazytensor scalars={policy}", file=sys.stderr, flush=True)
            dump_dir = os.path.join(work, f"dump-{policy}")
            failure = lazytensor_dump(args.lazytensor, policy, dump_dir, args)
            rows.append(lazytensor_row(args.lazytensor, policy, failure, dump_dir, work, args))
            if policy == "argument" and not failure and not args.dump:
                args.dump = dump_dir
    else:
        rows.append({"peer": "lazytensor", "variant": "all policies", "hf": True,
                     "agreement": {"status": "n/a", "error": "binary missing"},
                     "timing": {"status": "not run",
                                "error": f"{args.lazytensor} missing (build it first)"}})
    dump_note = "no tiny dump (lazytensor binary missing; --dump DIR gives one)"

    wanted = [p for p in PEERS if not args.peers
              or any(s.strip().lower() in f"{p.name} {p.variant}".lower()
                     for s in args.peers.split(","))]
    for peer in wanted:
        print(f"running {peer.name}: {peer.variant}", file=sys.stderr, flush=True)
        row = {"peer": peer.name, "variant": peer.variant, "hf": peer.hf}
        if not peer.hf:
            row["differs"] = peer.differs
        if peer.hf and args.dump:
            row["agreement"] = run_peer(peer, "check", args.dump, 0, args)
        row["timing"] = run_peer(peer, "time", data, args.steps, args)
        rows.append(row)

    base = rows[0]["timing"].get("step_seconds_median") if have_lt else None
    print(table(rows, base, dump_note))
    busiest = max((r["timing"].get("other_cpu") or 0 for r in rows), default=0)
    if busiest > 0.1:
        # Other work on the cores skews times, OpenMP-threaded peers (torch) the most.
        print(f"\nWARNING: other processes used up to {busiest:.0%} of the CPUs during a row; "
              "times in such rows are unreliable.")
    print("\n*transfers and compiles: counted over the timed steps (after the warm-up step); "
          "'-' where the framework does not count them. vs lazytensor: median step time over "
          "lazytensor's with scalars=argument (above 1x: slower than lazytensor). other CPU: "
          "share of the CPUs used by other processes during the row's timing run.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "model": args.model, "tensors": len(shapes),
                       "params": nparams, "steps": args.steps, "shapes_from": shapes_source,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
