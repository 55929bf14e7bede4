"""The compiled modules (Cython .pyx, pybind11 runtime/_*.so) ship .pyi stubs, and the stubs match what the modules
really hold: every public name of a module and of its classes is in its stub, and nothing the stub names is missing
from the module. So a stub cannot fall behind (or run ahead of) the code it describes."""
import ast
import importlib
import inspect
import pathlib
import typing

import pytest

PKG = pathlib.Path(__file__).resolve().parents[2] / "tinygrad"


def _compiled_modules() -> list[pathlib.Path]:
    """Each compiled module's source-side path without a suffix: every .pyx, and every pybind11 runtime/_*.so."""
    stems = {p.with_suffix("") for p in PKG.rglob("*.pyx")}
    stems |= {p.parent / p.name.split(".")[0] for p in (PKG / "runtime").glob("_*.so")}
    return sorted(stems)


def _module_name(stem: pathlib.Path) -> str:
    return ".".join(stem.relative_to(PKG.parent).parts)


def _foreign(name: str, obj) -> bool:
    """Whether `obj` is a helper the module imported from outside tinygrad (a module, a stdlib class or function, a
    typing form): an implementation detail its stub need not re-export. Names imported from other tinygrad modules
    do count: code reaches them through the compiled module (`from tinygrad.lazy import LazyBuffer, LoadOps`)."""
    if inspect.ismodule(obj) or getattr(typing, name, None) is obj:
        return True
    if inspect.isclass(obj) or inspect.isroutine(obj):
        return not str(getattr(obj, "__module__", "") or "").startswith("tinygrad")
    return False


def _body_names(body: list[ast.stmt]) -> set[str]:
    """Names a stub's module or class body defines: classes, functions, annotated or assigned names, and explicit
    re-exports (`from x import y as y`, the stub convention; a plain import is only for the stub's own use)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(a.asname for a in node.names if a.asname is not None and a.asname == a.name.split(".")[-1])
    return names


def _public(names) -> set[str]:
    return {n for n in names if not n.startswith("_")}


def _methods(cls) -> set[str]:
    """The public names a class defines itself (methods, properties, fields), plus the dunders a stub should give."""
    own = set(vars(cls))
    return _public(own) | (own & {"__init__", "__call__", "__len__"})


MODULES = _compiled_modules()


def test_compiled_modules_found():
    # the Cython modules and both runtimes; a glob that found nothing would make every test below vacuous
    names = {_module_name(s) for s in MODULES}
    assert {"tinygrad.lazy", "tinygrad.shape.symbolic", "tinygrad.runtime._cpu", "tinygrad.runtime._cuda"} <= names


def test_package_is_typed():
    assert (PKG / "py.typed").is_file()


@pytest.mark.parametrize("stem", MODULES, ids=_module_name)
def test_stub_matches_module(stem: pathlib.Path):
    stub = stem.with_suffix(".pyi")
    assert stub.is_file(), f"{_module_name(stem)} has no stub {stub.relative_to(PKG.parent)}"
    tree = ast.parse(stub.read_text(), filename=str(stub))
    module = importlib.import_module(_module_name(stem))

    in_stub = _body_names(tree.body)
    actual = {n for n in _public(dir(module)) if not _foreign(n, getattr(module, n))}
    assert not actual - in_stub, f"{stub.name} lacks public names of the module: {sorted(actual - in_stub)}"
    assert not _public(in_stub) - set(dir(module)), \
        f"{stub.name} names what the module lacks: {sorted(_public(in_stub) - set(dir(module)))}"

    stub_classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for name in actual:
        cls = getattr(module, name)
        if not inspect.isclass(cls) or cls.__module__ != module.__name__:
            continue
        members = _body_names(stub_classes[name].body)
        # an override (a cpdef method redefined by a subclass) is covered by the base class's entry in the stub
        inherited = set().union(*[_body_names(stub_classes[b.__name__].body) for b in cls.__mro__[1:]
                                  if b.__name__ in stub_classes and b.__module__ == module.__name__])
        missing = _methods(cls) - members - inherited
        assert not missing, f"{stub.name}: class {name} lacks {sorted(missing)}"
        extra = sorted(m for m in members if not hasattr(cls, m))
        assert not extra, f"{stub.name}: class {name} names what the class lacks: {extra}"
