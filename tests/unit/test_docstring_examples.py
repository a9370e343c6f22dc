"""The ``Example::`` blocks of sparkstate's docstrings: those written as doctests (``>>>``)
run; the others, fragments of a larger program, must compile and name only what exists:
sparkstate's public names (``sparkstate.__all__``, and their attributes), the names of
their own module, or the few a reader brings (a ``job``, a ``ctx``, another example's class).
The error tree drawn in ``errors.py``'s docstring must be the classes' own."""

from __future__ import annotations

import ast
import builtins
import doctest
import importlib
import re
import textwrap
from pathlib import Path

import pytest

import sparkstate

PACKAGE = Path(sparkstate.__file__).parent

#: names an example may use without defining them: the surroundings it is a fragment of
READER_NAMES = {
    "self", "ctx", "job",  # inside a function's method, a job built earlier
    "RunningSum", "Average",  # the classes of KeyedProcessFunction's and AggregateFunction's examples
    "timedelta", "collections",  # standard imports left out
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _examples() -> list[tuple[str, str, str]]:
    """``(module, where, code)`` of every ``Example::`` block."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in [tree, *ast.walk(tree)]:
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc or "Example::" not in doc:
                continue
            where = f"{_module(path)}" + (f".{node.name}" if not isinstance(node, ast.Module) else "")
            lines = doc.split("Example::", 1)[1].splitlines()[1:]
            block = []
            for line in lines:
                if line.strip() and not line.startswith(" "):
                    break  # the docstring's text goes on after the example
                block.append(line)
            found.append((_module(path), where, textwrap.dedent("\n".join(block)).strip() + "\n"))
    return sorted(set(found))


EXAMPLES = _examples()
FRAGMENTS = [e for e in EXAMPLES if ">>>" not in e[2]]
DOCTEST_MODULES = sorted({m for m, _, code in EXAMPLES if ">>>" in code})


def test_examples_are_found():
    assert len(EXAMPLES) >= 20 and FRAGMENTS and DOCTEST_MODULES


@pytest.mark.parametrize("module", DOCTEST_MODULES)
def test_doctest_examples_run(module, capsys):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, capsys.readouterr().out


def _bound(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _module_names(module: str) -> set[str]:
    """The top-level names of a module's source (read, not imported)."""
    path = PACKAGE.parent.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    return _bound(ast.Module(body=[n for n in ast.parse(path.read_text()).body if not isinstance(n, ast.If)], type_ignores=[]))


@pytest.mark.parametrize("module, where, code", FRAGMENTS, ids=[w for _, w, _ in FRAGMENTS])
def test_fragment_examples_name_real_things(module, where, code):
    tree = ast.parse(code, f"{where} (Example::)")
    known = _bound(tree) | READER_NAMES | set(dir(builtins)) | set(sparkstate.__all__) | _module_names(module)
    unknown = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in known})
    assert not unknown, f"{where}: its example uses {unknown}, which sparkstate does not have"
    from_sparkstate = {
        a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "sparkstate"
        for a in n.names
    }
    public = {name: getattr(sparkstate, name) for name in sparkstate.__all__ if name not in _bound(tree) - from_sparkstate}
    missing = sorted(
        f"{n.value.id}.{n.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
        and n.value.id in public and not hasattr(public[n.value.id], n.attr)
    )
    assert not missing, f"{where}: its example uses {missing}, which do not exist"


def test_the_error_tree_drawn_in_errors_matches_the_classes():
    from sparkstate import errors

    drawn, parents = {}, []
    for line in errors.__doc__.splitlines():
        m = re.match(r"^ {4}([│├└─ ]*)(\w+Error)(?: \((\w+)\))?", line)
        if not m:
            continue
        depth = len(m.group(1)) // 4
        parents[depth:] = [m.group(2)]
        drawn[m.group(2)] = (parents[depth - 1] if depth else None, m.group(3))
    classes = {
        name: cls for name, cls in vars(errors).items()
        if isinstance(cls, type) and issubclass(cls, errors.SparkStateError)
    }
    assert set(drawn) == set(classes)
    for name, cls in classes.items():
        parent = next((b.__name__ for b in cls.__bases__ if b.__module__ == errors.__name__), None)
        builtin = next((b.__name__ for b in cls.__bases__ if b.__module__ == "builtins"), None)
        assert drawn[name] == (parent, builtin), f"errors.py's tree draws {name} as {drawn[name]}"
