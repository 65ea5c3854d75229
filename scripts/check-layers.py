#!/usr/bin/env python3
"""The daemon's layering, checked from its `crate::` paths.

- No module of the core (executor/, runner/, journal/, ingest) names the
  shell (http/, cli/) or the wiring (daemon.rs).
- No two top-level modules of daemon/src name each other, directly.

Every `crate::<module>` path in a file counts (use lines and paths inside
code alike); comments and doc comments do not. Exits 1 and lists what it
found when a rule is broken.

    python3 scripts/check-layers.py [daemon/src]
"""

import pathlib
import re
import sys

CORE = {"executor", "runner", "journal", "ingest"}
SHELL = {"http", "cli", "daemon"}

PATH = re.compile(r"\bcrate::(?:\{([^}]*)\}|([a-z_][a-z0-9_]*))")


def top_module(src: pathlib.Path, file: pathlib.Path) -> str:
    rel = file.relative_to(src)
    return rel.parts[0].removesuffix(".rs")


def named_modules(text: str) -> set:
    """Top-level modules a file's code names through `crate::`."""
    code = "\n".join(line.split("//", 1)[0] for line in text.splitlines())
    found = set()
    for group, single in PATH.findall(code):
        names = [single] if single else [p.strip().split("::")[0] for p in group.split(",")]
        found.update(n for n in names if n and n not in ("self",))
    return found


def main() -> int:
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "daemon/src")
    uses = {}  # module -> {named module: [files]}
    for file in sorted(src.rglob("*.rs")):
        module = top_module(src, file)
        if module in ("lib", "main"):
            continue
        for named in named_modules(file.read_text()):
            if named != module:
                uses.setdefault(module, {}).setdefault(named, []).append(str(file))
    problems = []
    for module, named in sorted(uses.items()):
        if module in CORE:
            for shell in sorted(SHELL & named.keys()):
                for f in named[shell]:
                    problems.append(f"core module {module} names {shell}: {f}")
        for other, files in sorted(named.items()):
            if module < other and module in uses.get(other, {}):
                back = uses[other][module]
                problems.append(
                    f"{module} and {other} name each other: {files[0]} -> {other}, "
                    f"{back[0]} -> {module}"
                )
    modules = len({top_module(src, f) for f in src.rglob("*.rs")})
    if problems:
        print("\n".join(problems))
        return 1
    edges = sum(len(v) for v in uses.values())
    print(f"layers ok: {modules} top-level modules, {edges} uses between them, "
          "no core module names the shell, no two modules name each other")
    return 0


if __name__ == "__main__":
    sys.exit(main())
