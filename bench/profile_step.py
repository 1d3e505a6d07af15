#!/usr/bin/env python3
"""Where a training step's device time goes, from a `lazytensor train --trace` timeline.

    python3 bench/profile_step.py out/trace.json [--skip 1]

Sums the device's launch spans (category "launch": matmul, elementwise kernel, reduction
kernel, row group, index_select, index_add, collective) inside each execution span
("execute") and prints a Markdown table of milliseconds per step and shares of the launches'
total. The first --skip executions are left out (the first step compiles, and its kernels run
on the interpreter until the native ones are ready). Evaluation graphs (forward only) are
executions too: profile a run with --eval-batches 0. Standard library only.
"""
import argparse
import collections
import json
import statistics
import sys


def load_events(path):
    with open(path) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="Chrome trace-event JSON from lazytensor train --trace")
    ap.add_argument("--skip", type=int, default=1, help="executions left out at the start")
    args = ap.parse_args()

    events = [e for e in load_events(args.trace) if e.get("ph") == "X"]
    executions = sorted((e for e in events if e.get("name") == "execute"),
                        key=lambda e: e["ts"])[args.skip:]
    if not executions:
        sys.exit(f"{args.trace}: no execution after the first {args.skip}")
    launches = sorted((e for e in events if e.get("cat") == "launch"), key=lambda e: e["ts"])
    per_step = []  # per execution: {kind: microseconds}, and the execution's own span
    for run in executions:
        begin, end = run["ts"], run["ts"] + run["dur"]
        kinds = collections.Counter()
        count = collections.Counter()
        for launch in launches:
            if begin <= launch["ts"] and launch["ts"] + launch["dur"] <= end:
                kinds[launch["name"]] += launch["dur"]
                count[launch["name"]] += 1
        per_step.append((kinds, count, run["dur"]))

    names = sorted({k for kinds, _, _ in per_step for k in kinds},
                   key=lambda k: -statistics.median(kinds.get(k, 0) for kinds, _, _ in per_step))
    median_total = statistics.median(sum(kinds.values()) for kinds, _, _ in per_step)
    median_execute = statistics.median(dur for _, _, dur in per_step)
    print(f"{len(per_step)} executions (medians; the first {args.skip} left out): "
          f"execution {median_execute / 1e3:.1f} ms, launches {median_total / 1e3:.1f} ms\n")
    print("| launches | per step (ms) | share | launches per step |\n|---|---:|---:|---:|")
    for name in names:
        ms = statistics.median(kinds.get(name, 0) for kinds, _, _ in per_step) / 1e3
        n = statistics.median(count.get(name, 0) for _, count, _ in per_step)
        print(f"| {name} | {ms:.1f} | {100 * ms * 1e3 / median_total:.0f}% | {n:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
