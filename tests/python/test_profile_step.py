"""bench/profile_step.py on a timeline made here: medians per step over the executions kept, and
the glue table of --top, the numbers worked out by hand."""
import json
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "profile_step.py"


def launch(name, ts, dur, detail=""):
    return {"name": name, "cat": "launch", "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": {"detail": detail}}


def timeline(path):
    """Four executions of 10 ms; the first is left out. Per kept step (microseconds): matmul 6000;
    softmax 1000, 3000, 2000 (median 2000); gelu twice, 400 each (800, 2 a step); and a launch
    outside every execution, which does not count."""
    events = [launch("elementwise kernel", 50_000, 100, "outside")]
    for step in range(4):
        start = step * 10_000
        events.append({"name": "execute", "cat": "device", "ph": "X", "ts": start, "dur": 10_000,
                       "pid": 1, "tid": 1})
        softmax = [500, 1000, 3000, 2000][step]
        events += [
            launch("matmul", start + 10, 6000, "matmul f32 [8, 8] x f32 [8, 8] -> f32 [8, 8]"),
            launch("row group", start + 6020, softmax, "softmax | rows"),
            launch("elementwise kernel", start + 9030, 400, "gelu"),
            launch("elementwise kernel", start + 9500, 400, "gelu"),
        ]
    path.write_text(json.dumps({"traceEvents": events}))


def test_medians_per_step_and_the_glue_table(tmp_path):
    trace = tmp_path / "trace.json"
    timeline(trace)
    out = subprocess.run([sys.executable, str(SCRIPT), str(trace), "--skip", "1", "--top", "5"],
                         check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    assert lines[0].startswith("3 executions (medians; the first 1 left out): execution 10.0 ms")
    assert "launches 8.8 ms" in lines[0]  # 6000 + 2000 + 800 microseconds
    assert "| matmul | 6.0 | 68% | 1 |" in lines
    assert "| row group | 2.0 | 23% | 1 |" in lines
    assert "| elementwise kernel | 0.8 | 9% | 2 |" in lines
    top = lines[lines.index("|---|---:|---:|---:|", lines.index("| matmul | 6.0 | 68% | 1 |")) + 1:]
    # GEMMs are left out; the '|' inside a description is escaped for Markdown.
    assert top == ["| row group: softmax \\| rows | 2.0 | 22.7% | 1 |",
                   "| elementwise kernel: gelu | 0.8 | 9.1% | 2 |"]


def test_no_execution_left_is_an_error(tmp_path):
    trace = tmp_path / "trace.json"
    timeline(trace)
    result = subprocess.run([sys.executable, str(SCRIPT), str(trace), "--skip", "4"],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "no execution after the first 4" in result.stderr
