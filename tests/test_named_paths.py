"""Docs and docstrings that name a module name one that exists.

README.md, docs/, and the code, tests and benchmarks name modules by path (`broker/network/
connection.py`, `security/tls_reload.py`) and by dotted name (`kompakt.broker.server.Broker`), in
prose, docstrings, comments, logger names and subprocess code. A module that moves or goes leaves
them pointing at nothing; this test lists every such reference with its file and line.

A path counts when some file of the repository ends with it (so `store_file.py` relative to its
room, and `broker/metadata/store_file.py` from anywhere, are both found); a dotted name when a
prefix of it is a module or package of kompakt (the rest are attributes: `...server.Broker.start`).
Dotted names are checked under kompakt's packages only, and config keys (`kompakt.cleaner.guarantee.
check.ratio`: string constants of kompakt/config) and logger names that are not module names
(`getLogger("kompakt.broker.security.sasl")`) are known for what they are. bench/RESULTS.md is
left out (its entries record the tree of their date), and so is this file (it names moved modules
on purpose).
"""
from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", "__pycache__", "node_modules", ".pytest_cache", "build", "dist"}
PACKAGES = ("broker", "storage", "cleaner", "protocol", "config", "pipeline", "clients", "console", "testing",
            "native", "cli")

SLASH_PATH = re.compile(r"(?<![\w./-])((?:[a-z_][a-z0-9_]*/)+[a-z_][a-z0-9_]*\.py)\b")
DOTTED = re.compile(r"(?<![\w.])(kompakt\.(?:%s)(?:\.[A-Za-z_][A-Za-z0-9_]*)*)" % "|".join(PACKAGES))


def repo_files() -> list[Path]:
    found = []
    stack = [REPO]
    while stack:
        for entry in stack.pop().iterdir():
            if entry.is_dir():
                if entry.name not in SKIP_DIRS and not entry.name.startswith("."):
                    stack.append(entry)
            elif entry.is_file():
                found.append(entry)
    return found


FILES = repo_files()
RELATIVE = {f.relative_to(REPO).as_posix() for f in FILES}
MODULES = {p[:-3].replace("/", ".").removesuffix(".__init__") for p in RELATIVE
           if p.startswith("kompakt/") and p.endswith(".py")}


# a name a test uses because no module has it (the broker must refuse to set its log level)
NOT_MODULES = {"kompakt.broker.handlers.no_such_module"}


def _strings(paths, want) -> set[str]:
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            for value in want(node):
                if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.startswith("kompakt."):
                    found.add(value.value)
    return found


CONFIG_KEYS = _strings(sorted((REPO / "kompakt" / "config").glob("*.py")), lambda node: [node])
LOGGER_NAMES = _strings(sorted((REPO / "kompakt").rglob("*.py")), lambda node: node.args[:1] if (
    isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "getLogger") else [])
KNOWN = NOT_MODULES | CONFIG_KEYS | LOGGER_NAMES


def readers() -> list[Path]:
    """The texts that name modules: README, docs, and every Python file (code, tests, benchmarks)."""
    left_out = {"bench/RESULTS.md", "tests/test_named_paths.py"}
    return sorted(f for f in FILES if f.relative_to(REPO).as_posix() not in left_out
                  and (f.suffix == ".py" or (f.suffix == ".md" and (f.parent == REPO or "docs" in f.parts))))


def path_exists(ref: str) -> bool:
    return any(p == ref or p.endswith("/" + ref) for p in RELATIVE)


@cache
def top_level_names(module: str) -> frozenset[str]:
    """What a module defines or imports at its top level (its attributes a text may name)."""
    path = REPO / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = REPO / module.replace(".", "/") / "__init__.py"
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return frozenset(names)


def module_exists(ref: str) -> bool:
    """The longest prefix of `ref` that is a module, and the next name, if any, one it defines."""
    parts = ref.split(".")
    for i in range(len(parts), 1, -1):
        module = ".".join(parts[:i])
        if module in MODULES:
            return i == len(parts) or parts[i] in top_level_names(module)
    return False


def stale_references(text: str) -> list[tuple[int, str]]:
    out = [(m.start(), m.group(1)) for m in SLASH_PATH.finditer(text) if not path_exists(m.group(1))]
    out += [(m.start(), m.group(1)) for m in DOTTED.finditer(text)
            if m.group(1) not in KNOWN and not module_exists(m.group(1))]
    return [(text.count("\n", 0, pos) + 1, ref) for pos, ref in sorted(out)]


def test_every_named_module_exists():
    stale = [f"{f.relative_to(REPO)}:{line}: {ref}" for f in readers()
             for line, ref in stale_references(f.read_text(errors="replace"))]
    assert not stale, "names of modules that do not exist:\n" + "\n".join(stale)


def test_a_moved_module_is_reported():
    # the check can fail: the names a module had before it found its room are reported, its
    # present ones are not
    text = ("see broker/fetch_wait.py and kompakt.broker.metrics.Metrics;\n"
            "now broker/fetch/wait.py, network/connection.py and kompakt.broker.observability.metrics.Metrics")
    assert stale_references(text) == [(1, "broker/fetch_wait.py"), (1, "kompakt.broker.metrics.Metrics")]
    assert readers() and MODULES
