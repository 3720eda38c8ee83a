"""The type stubs (``imgseq/__init__.pyi``) against the module: every public name, class,
method and property of ``imgseq`` has its stub with the same parameters, and the namespace
shows the API only. The stubs cannot drift from the code without this failing."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import imgseq

STUBS = Path(imgseq.__file__).with_name("__init__.pyi")


def stub_tree():
    tree = ast.parse(STUBS.read_text())
    classes, functions = {}, {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = {}
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    members[item.name] = item
            classes[node.name] = members
        elif isinstance(node, ast.FunctionDef):
            functions[node.name] = node
    return classes, functions


def params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.args + fn.args.kwonlyargs]


def test_the_namespace_shows_the_api_only():
    public = sorted(n for n in dir(imgseq) if not n.startswith("_"))
    assert public == sorted(imgseq.__all__), set(public) ^ set(imgseq.__all__)


def test_every_public_name_class_and_method_has_its_stub():
    classes, functions = stub_tree()
    for name in imgseq.__all__:
        obj = getattr(imgseq, name)
        if inspect.isclass(obj):
            assert name in classes, f"no stub for class {name}"
            stub = classes[name]
            own = {k: v for k, v in vars(obj).items() if not k.startswith("_") or k == "__init__"}
            for member, value in own.items():
                assert member in stub, f"{name}.{member} has no stub"
                fn = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
                if isinstance(fn, property):
                    fn = fn.fget
                code = list(inspect.signature(fn).parameters)
                assert params(stub[member]) == code, (name, member, params(stub[member]), code)
            extra = set(stub) - set(own) - {"__init__"}
            assert not extra, f"{name}: stubs for what the class lacks: {extra}"
        elif inspect.isfunction(obj):
            assert name in functions, f"no stub for function {name}"
            code = list(inspect.signature(obj).parameters)
            assert params(functions[name]) == code, (name, params(functions[name]), code)
