"""The package's modules import downward only: no cycles, and the layers' rules (code generation below the
renderers, runtimes below the lazy graph, the collectives and the engine, the engine's runner below the JIT).
Imports inside functions count (they are run-time dependencies all the same); imports under `if TYPE_CHECKING:`
do not. Cython's `cimport`s count too."""
import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PKG = ROOT / "tinygrad"

_PYX_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import\s+(.+)|c?import\s+([\w.]+))", re.M)


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _py_imports(path: pathlib.Path) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) for every import outside `if TYPE_CHECKING:` blocks."""
    out: list[tuple[str, list[str]]] = []
    todo: list[ast.AST] = [ast.parse(path.read_text())]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names]))
        todo.extend(ast.iter_child_nodes(node))
    return out


def _pyx_imports(path: pathlib.Path) -> list[tuple[str, list[str]]]:
    out = []
    for m in _PYX_IMPORT.finditer(path.read_text()):
        if m.group(1):
            out.append((m.group(1), [n for n in re.split(r"[,\s()]+", m.group(2)) if n]))
        else:
            out.append((m.group(3), []))
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the tinygrad modules it imports (a `from pkg import mod` names the submodule)."""
    files = [p for p in PKG.rglob("*") if p.suffix in (".py", ".pyx", ".pxd")]
    modules = {_module_name(p) for p in files}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for p in files:
        me = _module_name(p)
        for target, names in (_py_imports(p) if p.suffix == ".py" else _pyx_imports(p)):
            if not target.startswith("tinygrad"):
                continue
            for dep in [target] + [f"{target}.{n}" for n in names]:
                if dep in modules and dep != me:
                    graph[me].add(dep)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_among_tinygrad_modules():
    graph = import_graph()
    assert "tinygrad.engine.plan" in graph and graph["tinygrad.engine.plan"], "the .pyx files were not scanned"
    assert cycles(graph) == []


def test_the_checker_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from tinygrad import lazy\n    import tinygrad.engine.realize\n")
    assert sorted(_py_imports(f)) == [("tinygrad", ["lazy"]), ("tinygrad.engine.realize", [])]


# what a layer may not import (module-name prefixes): code generation decides what a kernel does and the renderers
# only spell it, so codegen never reaches for a renderer; a runtime runs programs and moves bytes, below the lazy
# graph, the collectives built on it and the engine that schedules it
_FORBIDDEN = {
    "tinygrad.codegen.": ("tinygrad.renderer",),
    "tinygrad.runtime.": ("tinygrad.lazy", "tinygrad.engine", "tinygrad.collectives"),
}


def _breaches(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for mod, deps in sorted(graph.items()):
        for layer, banned in _FORBIDDEN.items():
            if mod.startswith(layer):
                out += [f"{mod} imports {d}" for d in sorted(deps) if d.startswith(banned)]
    return out


def test_the_layer_rules_catch_a_breach():
    assert _breaches({"tinygrad.codegen.x": {"tinygrad.renderer.cuda"}, "tinygrad.runtime.y": {"tinygrad.lazy"},
                      "tinygrad.runtime.z": {"tinygrad.collectives_nccl", "tinygrad.device"}}) == [
        "tinygrad.codegen.x imports tinygrad.renderer.cuda", "tinygrad.runtime.y imports tinygrad.lazy",
        "tinygrad.runtime.z imports tinygrad.collectives_nccl"]


def test_layers_import_downward():
    graph = import_graph()
    assert _breaches(graph) == []
    assert "tinygrad.engine.jit" not in graph["tinygrad.engine.realize"]
    assert "tinygrad.engine.jit" not in graph["tinygrad.engine.plan"]
    # devices plug in; the engine and the JIT never name one
    for mod in ("tinygrad.engine.realize", "tinygrad.engine.jit", "tinygrad.engine.plan"):
        assert not [d for d in graph[mod] if d.startswith("tinygrad.runtime.")], f"{mod} names a runtime"


def test_engine_and_jit_never_test_a_device_name():
    for rel in ("engine/realize.py", "engine/jit.py", "engine/plan.pyx", "engine/schedule.pyx"):
        src = (PKG / rel).read_text()
        assert not re.search(r"""["'](CUDA|CLANG|CPU|AMD|METAL)["'\d:]""", src), f"{rel} names a device"


def test_doc_paths_exist():
    """Every tinygrad/... path the docs and the README name is a file of the package (lazy.py is lazy.pyx)."""
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for path in re.findall(r"`(tinygrad/[\w/]+\.(?:py|pyx|pxd))`", doc.read_text()):
            assert (ROOT / path).exists(), f"{doc.name} names {path}, which does not exist"
