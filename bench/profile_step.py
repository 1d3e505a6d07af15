#!/usr/bin/env python3
"""Where a training step's device time goes, from a `lazytensor train --trace` timeline.

    python3 bench/profile_step.py out/trace.json [--skip 1] [--top 20]

Sums the device's launch spans (category "launch": matmul, elementwise kernel, reduction
kernel, row group, index_select, index_add, collective) inside each execution span
("execute") and prints a Markdown table of milliseconds per step and shares of the launches'
total. The first --skip executions are left out (the first step compiles, and its kernels run
on the interpreter until the native ones are ready). Evaluation graphs (forward only) are
executions too: profile a run with --eval-batches 0. With --top N, a second table lists the N
launches other than GEMMs (the glue between them) that take the most time per step, by their
description (the timeline's `args.detail`: op counts, shapes, dtypes), with how many of each a
step runs. Standard library only.
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
    ap.add_argument("--top", type=int, default=0,
                    help="also list the N costliest non-GEMM launch descriptions")
    args = ap.parse_args()

    events = [e for e in load_events(args.trace) if e.get("ph") == "X"]
    executions = sorted((e for e in events if e.get("name") == "execute"),
                        key=lambda e: e["ts"])[args.skip:]
    if not executions:
        sys.exit(f"{args.trace}: no execution after the first {args.skip}")
    launches = sorted((e for e in events if e.get("cat") == "launch"), key=lambda e: e["ts"])
    per_step = []  # per execution: {kind: microseconds}, and the execution's own span
    per_detail = []  # per execution: {(kind, description): microseconds}, and counts
    for run in executions:
        begin, end = run["ts"], run["ts"] + run["dur"]
        kinds = collections.Counter()
        count = collections.Counter()
        details = collections.Counter()
        detail_count = collections.Counter()
        for launch in launches:
            if begin <= launch["ts"] and launch["ts"] + launch["dur"] <= end:
                kinds[launch["name"]] += launch["dur"]
                count[launch["name"]] += 1
                if launch["name"] != "matmul":
                    key = (launch["name"], launch.get("args", {}).get("detail", ""))
                    details[key] += launch["dur"]
                    detail_count[key] += 1
        per_step.append((kinds, count, run["dur"]))
        per_detail.append((details, detail_count))

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
    if args.top > 0:
        print_top(per_detail, median_total, args.top)
    return 0


def print_top(per_detail, median_total, top):
    """The costliest non-GEMM launch descriptions, medians over the executions."""
    keys = {k for details, _ in per_detail for k in details}
    rows = []
    for key in keys:
        us = statistics.median(details.get(key, 0) for details, _ in per_detail)
        n = statistics.median(counts.get(key, 0) for _, counts in per_detail)
        rows.append((us, n, key))
    rows.sort(key=lambda row: -row[0])
    print(f"\n| the {top} costliest launches besides GEMMs | per step (ms) | share | per step |")
    print("|---|---:|---:|---:|")
    for us, n, (name, detail) in rows[:top]:
        text = f"{name}: {detail}" if detail else name
        if len(text) > 160:
            text = text[:157] + "..."
        text = text.replace("|", "\\|")
        print(f"| {text} | {us / 1e3:.1f} | {100 * us / median_total:.1f}% | {n:.0f} |")


if __name__ == "__main__":
    sys.exit(main())
