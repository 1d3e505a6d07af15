#!/usr/bin/env python3
"""Checks every `#include "..."` of the tree against layering.toml's rooms.

Prints each broken rule as `file:line: <room> may not include <path> (room <other>)` and exits 1
when there is one; a file that belongs to no room, or an include that resolves to no file, is
an error too (a new folder must be given a room). Usage: check_layering.py [REPOSITORY_ROOT]
"""
import re
import sys
import tomllib
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_SUFFIXES = {".h", ".cpp", ".def"}
CHECKED_TOP = ("src", "include", "tools", "python/src", "lazytensor_torch/csrc")


def glob_to_regex(pattern: str) -> re.Pattern:
    """A glob where `*` stays within one folder and `**` crosses folders."""
    parts = re.split(r"(\*\*|\*)", pattern)
    text = "".join(".*" if p == "**" else "[^/]*" if p == "*" else re.escape(p) for p in parts)
    return re.compile(text + "$")


def room_of(path: str, rooms: dict) -> str | None:
    for name, room in rooms.items():
        if any(regex.match(path) for regex in room["regexes"]):
            return name
    return None


def resolve(root: Path, including: Path, target: str) -> str | None:
    """The included file, relative to the root: beside the includer, then include/, then src/."""
    for base in (including.parent, root / "include", root / "src"):
        candidate = base / target
        if candidate.is_file():
            return candidate.resolve().relative_to(root).as_posix()
    return None


def check(root: Path) -> list[str]:
    rules = tomllib.loads((root / "layering.toml").read_text())["rooms"]
    for name, room in rules.items():
        room["regexes"] = [glob_to_regex(pattern) for pattern in room["files"]]
        for other in room["may_include"]:
            if other not in rules:
                raise SystemExit(f"layering.toml: room {name} names unknown room {other}")
    problems = []
    files = sorted(
        p for top in CHECKED_TOP for p in (root / top).rglob("*")
        if p.suffix in SOURCE_SUFFIXES and p.is_file())
    for path in files:
        relative = path.relative_to(root).as_posix()
        room = room_of(relative, rules)
        if room is None:
            problems.append(f"{relative}: belongs to no room of layering.toml")
            continue
        allowed = {room, *rules[room]["may_include"]}
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target = resolve(root, path, match.group(1))
            if target is None:
                if match.group(1).endswith(".inc"):  # generated at build time
                    continue
                problems.append(f"{relative}:{number}: \"{match.group(1)}\" resolves to no file")
                continue
            other = room_of(target, rules)
            if other not in allowed:
                problems.append(f"{relative}:{number}: {room} may not include {target} "
                                f"(room {other}); {room} may include: "
                                f"{', '.join(sorted(allowed))}")
    return problems


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parents[2]).resolve()
    problems = check(root)
    for problem in problems:
        print(problem)
    print(f"layering: {len(problems)} broken rule(s)" if problems else "layering: every include keeps the rules")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
