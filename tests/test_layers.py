"""The package layout holds the data flow: protocol -> broker -> storage <- cleaner, pipeline beside.

Read from kompakt/'s source with `ast` (nothing is imported), so a new import that runs back up the
flow fails here, in the change that adds it, whether it sits at the top of a module or inside a
function (a lazy import is still a dependency):

  package    may import (besides itself and the root `kompakt` package)
  native     nothing
  protocol   native
  config     protocol, native
  storage    config, protocol, native
  cleaner    storage, config, protocol, native
  pipeline   cleaner, storage, config, protocol, native
  clients    protocol, config, native
  (broker, console, testing, cli, __main__ sit on top and are not limited here)

Inside the broker, `kompakt.broker.server` (the Broker, which builds every room) is imported only by
what runs it: the `kompakt serve` command and kompakt.testing; and the handlers (the wire face of the
rooms: groups, txn, fetch, quotas, ...) are imported only by each other and the dispatcher that
finds them (network/dispatch.py), never by a room they serve. The rooms other rooms build on
(fetch/, observability/, metadata/, coordinator_common/) import no other room of the broker. New capabilities arrive as rooms:
kompakt/broker/'s root holds the Broker, the command that runs it and the package files, nothing
loose. And no two modules import each other,
directly or round a longer loop, at import time (imports at a module's top level, with the
packages an import runs on the way: `import a.b.c` runs a/__init__ and a/b/__init__ first).
"""
from __future__ import annotations

import ast
from pathlib import Path

import kompakt

ROOT = Path(kompakt.__file__).parent

BELOW = {
    "native": set(),
    "protocol": {"native"},
    "config": {"protocol", "native"},
    "storage": {"config", "protocol", "native"},
    "cleaner": {"storage", "config", "protocol", "native"},
    "pipeline": {"cleaner", "storage", "config", "protocol", "native"},
    "clients": {"protocol", "config", "native"},
}
SERVER = "kompakt.broker.server"
RUNS_THE_BROKER = {"kompakt.broker.serve_cmd", "kompakt.testing.broker"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports(name: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, at top level) for every import of a kompakt module in `name`."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                for alias in child.names:    # `from pkg import mod` imports pkg.mod when it is a module
                    sub = f"{target}.{alias.name}"
                    found.append((sub if sub in MODULES else target, child.lineno, top))
            else:                            # a function body runs later; a class body at once
                visit(child, top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, True)
    return sorted({(t, line, top) for t, line, top in found if t == "kompakt" or t.startswith("kompakt.")})


def layer(name: str) -> str:
    return name.split(".")[1] if name.count(".") else ""


def test_the_module_walk_sees_the_tree():
    # a walk that found nothing would pass every rule below
    assert {"kompakt.protocol.codec", "kompakt.storage.log_manager", "kompakt.cleaner.cleaner",
            SERVER, "kompakt.broker.network.connection"} <= MODULES.keys()
    assert any(t.startswith("kompakt.protocol") for t, _, _ in imports("kompakt.storage.log_manager"))


def test_no_import_runs_back_up_the_data_flow():
    wrong = []
    for name in MODULES:
        allowed = BELOW.get(layer(name))
        if allowed is None:
            continue
        for target, line, _ in imports(name):
            if target != "kompakt" and layer(target) not in allowed | {layer(name)}:
                wrong.append(f"{MODULES[name].relative_to(ROOT.parent)}:{line} imports {target}")
    assert not wrong, "imports against the data flow:\n" + "\n".join(wrong)


def test_only_what_runs_the_broker_imports_it():
    wrong = [f"{MODULES[name].relative_to(ROOT.parent)}:{line}"
             for name in MODULES if name not in RUNS_THE_BROKER
             for target, line, _ in imports(name) if target == SERVER]
    assert not wrong, f"{SERVER} imported from: {wrong}"


BROKER_ROOT = {"__init__.py", "__main__.py", "server.py", "serve_cmd.py"}


def test_the_broker_root_holds_no_loose_module():
    loose = sorted(p.name for p in (ROOT / "broker").glob("*.py") if p.name not in BROKER_ROOT)
    assert not loose, (f"kompakt/broker/ has loose modules {loose}: give each a room (a subpackage "
                       "that says what it belongs to, e.g. network/, fetch/, txn/, observability/, metadata/)")


def test_every_module_and_package_says_what_it_is():
    # STYLE: a docstring at the top of each module saying role and invariants; a package's says
    # what its room holds
    bare = [str(path.relative_to(ROOT.parent)) for path in MODULES.values()
            if not ast.get_docstring(ast.parse(path.read_text()))]
    assert not bare, f"modules without a docstring: {bare}"


# rooms the others build on: each imports no other room of the broker, so none can loop back
FOUNDATION_ROOMS = ("fetch", "observability", "metadata", "coordinator_common")


def test_the_rooms_others_build_on_import_no_other_room():
    wrong = []
    for room in FOUNDATION_ROOMS:
        own = f"kompakt.broker.{room}"
        assert own in MODULES, f"{own} is gone: update FOUNDATION_ROOMS"
        for name in MODULES:
            if name == own or name.startswith(own + "."):
                wrong += [f"{MODULES[name].relative_to(ROOT.parent)}:{line} imports {target}"
                          for target, line, _ in imports(name)
                          if target.startswith("kompakt.broker") and not (target == own or target.startswith(own + "."))]
    assert not wrong, "a room others build on imports another room:\n" + "\n".join(wrong)


HANDLERS = "kompakt.broker.handlers"
FINDS_HANDLERS = {"kompakt.broker.network.dispatch"}


def test_no_room_imports_the_handlers_it_serves():
    wrong = [f"{MODULES[name].relative_to(ROOT.parent)}:{line} imports {target}"
             for name in MODULES if name not in FINDS_HANDLERS and not name.startswith(HANDLERS)
             for target, line, _ in imports(name) if target == HANDLERS or target.startswith(HANDLERS + ".")]
    assert not wrong, "handlers imported from below them:\n" + "\n".join(wrong)


def test_no_import_cycle_at_import_time():
    graph: dict[str, set[str]] = {}
    for name in MODULES:
        edges = graph.setdefault(name, set())
        for target, _, top in imports(name):
            if not top:
                continue
            parts = target.split(".")
            # importing a.b.c runs a/__init__ and a/b/__init__ first; a module's own packages are
            # already running when it is imported, so they are no edge of its
            for i in range(2, len(parts) + 1):
                step = ".".join(parts[:i])
                if step in MODULES and step != name and not name.startswith(step + "."):
                    edges.add(step)
    cycles = strongly_connected(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(sorted(c)) for c in cycles)


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative; the components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
    return found


def test_the_cycle_finder_finds_a_cycle():
    # the cycle test above can fail: a loop of three and a self-contained pair are both reported
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [{"a", "b", "c"}]
