"""The package's layers show in its imports: every import of every kvlib module (function-level
ones too) points to the same layer or a lower one, no module imports another's private names,
there is no import cycle, and no module swaps its own class."""
from __future__ import annotations

import ast
from pathlib import Path

import kvlib

PACKAGE = Path(kvlib.__file__).parent
#: The layers, lowest first (kvlib/__init__.py's docstring draws the same line).
LAYERS = ("core", "model", "hardware", "deployment", "engines", "speed", "fit", "serve", "report")


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(imported kvlib module, names taken from it) for every import in ``path``."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = (".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                    if node.level else (node.module or ""))
            if not base.startswith("kvlib"):
                continue
            names = [a.name for a in node.names]
            submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
            out += [(m, []) for m in submodules]
            if base in modules:
                out.append((base, [n for n in names if f"{base}.{n}" not in modules]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("kvlib")]
    return out


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_module_sits_in_a_layer() -> None:
    loose = [m for m in _modules() if m not in ("kvlib", "kvlib.__main__") and _layer(m) is None]
    assert not loose, f"modules outside the layers {LAYERS}: {loose}"


def test_imports_point_down_and_take_no_private_names() -> None:
    modules = _modules()
    upward, private = [], []
    for name, path in modules.items():
        if name in ("kvlib", "kvlib.__main__"):
            continue
        for target, names in _imports(name, path, modules):
            if _layer(target) is not None and _layer(target) > _layer(name):
                upward.append(f"{name} → {target}")
            private += [f"{name} takes {target}.{n}" for n in names if n.startswith("_")]
    assert not upward, f"imports of a higher layer: {upward}"
    assert not private, f"private names imported across modules: {private}"


def test_no_import_cycle() -> None:
    modules = _modules()
    edges = {n: {t for t, _ in _imports(n, p, modules) if t in modules and t != "kvlib"}
             for n, p in modules.items()}

    def reaches(start: str) -> bool:
        seen, todo = set(), list(edges[start])
        while todo:
            m = todo.pop()
            if m == start:
                return True
            if m not in seen:
                seen.add(m)
                todo += edges.get(m, ())
        return False

    assert not [m for m in edges if reaches(m)]


def test_no_module_swaps_its_class() -> None:
    swapped = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if "__class__ =" in p.read_text()]
    assert not swapped


def test_public_names_are_importable_from_kvlib() -> None:
    for name in kvlib.__all__:
        assert hasattr(kvlib, name), name
    assert callable(kvlib.recheck) and kvlib.recheck("a01").verdict
