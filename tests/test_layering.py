"""The layering contract of ``src/memrl``: a module imports only from its own layer or a lower one.

Layers, lowest first (a package's modules all sit in its layer):

0. ``memrl`` (the package root), ``memrl.types``, ``memrl.packed``, ``memrl.plugins`` (the Registry
   machinery) and ``memrl.installed_plugins`` (entry points), ``memrl.io`` (the files memrl writes and reads back: atomic writes, rollout records,
   metrics rows, ``DataError``), ``memrl.interrupts`` (a Ctrl-C kept until a command can act on it), ``memrl.signal_watch`` (a signal seen
   while the main thread is inside one long call);
1. ``memrl.models``, ``memrl.rewards``: leaf libraries (model loading, answer scoring) that
   everything above may use and that know nothing of configs;
2. ``memrl.config``;
3. ``memrl.rl``, ``memrl.engines``, ``memrl.testing`` (scripted engines for tests: it implements the
   engine interface and nothing in the library imports it);
4. ``memrl.data``, ``memrl.envs``, ``memrl.text`` (tokenizer round trips and the tool-call format,
   shared by the agent's workflows and the environment's user simulator and judge);
5. ``memrl.workflows``;
6. ``memrl.train``, ``memrl.dist`` (multi-process training: it launches the trainer);
7. ``memrl.eval``, ``memrl.serve``, ``memrl.view``, ``memrl.gateway`` (an OpenAI endpoint per episode,
   built on ``serve``; its workflow is reached through the registry by name), ``memrl.tinker`` (the
   Tinker API server, built on ``serve``, ``engines`` and ``train.logits``);
8. ``memrl.cli`` (and ``memrl.__main__``, ``python -m memrl``), and ``memrl_demo`` (the demo, installed beside the library; ``memrl demo`` loads it).

An edge is every ``import`` / ``from ... import`` anywhere in a module: at the top, inside a
function, under ``if TYPE_CHECKING``. A lazy import is still a dependency, only a later one.
``importlib.import_module`` of a string (a registry naming its plug-ins) is not an edge: that is
how a lower layer reaches a plug-in without depending on it.

Import cycles between modules are refused too (a cycle inside one layer is still two modules that
cannot be understood, tested or moved apart).

``PENDING`` lists the back-edges and cycles that go through files being rewritten by issue 26's
lead (plugins, config schema/load, the workflow registry, the trainer); each entry says why it is
there and what removes it. The list only shrinks: an entry that no longer matches a real edge fails
the test, so remove it when its edge goes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGES = ("memrl", "memrl_demo")

LAYERS: dict[str, int] = {
    "memrl": 0, "memrl.types": 0, "memrl.packed": 0, "memrl.plugins": 0, "memrl.installed_plugins": 0,
    "memrl.io": 0, "memrl.interrupts": 0, "memrl.signal_watch": 0,
    "memrl.models": 1, "memrl.rewards": 1,
    "memrl.config": 2,
    "memrl.rl": 3, "memrl.engines": 3, "memrl.testing": 3,
    "memrl.data": 4, "memrl.envs": 4, "memrl.text": 4,
    "memrl.workflows": 5,
    "memrl.train": 6, "memrl.dist": 6,
    "memrl.eval": 7, "memrl.serve": 7, "memrl.view": 7, "memrl.gateway": 7, "memrl.tinker": 7,
    "memrl.cli": 8, "memrl.__main__": 8, "memrl_demo": 8,
}

# (importer, imported) -> why it is allowed for now. Only the lead's files in flight appear here.
PENDING: dict[tuple[str, str], str] = {
}


def module_files(src: Path, packages: Iterable[str]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package ``__init__``) for every ``.py`` under the packages."""
    out: dict[str, tuple[Path, bool]] = {}
    for pkg in packages:
        for path in sorted((src / pkg).rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_pkg: bool, known: Mapping) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:  # relative: from the importer's package, one level up per extra dot
        base = module.split(".") if is_pkg else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    # ``from pkg import sub`` depends on the submodule when there is one, else on the package.
    return [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]


def import_edges(src: Path, packages: Iterable[str]) -> dict[tuple[str, str], int]:
    """(importer, imported module) -> first line, over every import statement in every module."""
    packages = tuple(packages)
    known = module_files(src, packages)
    edges: dict[tuple[str, str], int] = {}
    for module, (path, is_pkg) in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(node, module, is_pkg, known):
                if target.split(".")[0] in packages and target != module:
                    edges.setdefault((module, target), node.lineno)
    return edges


def layer_of(module: str, layers: Mapping[str, int]) -> int | None:
    """The layer of the longest key that is ``module`` or a package above it.

    A key with keys below it (``memrl``) places only itself, so a new subpackage has no layer
    until someone gives it one, rather than silently landing in the bottom layer.
    """
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in layers and (n == len(parts) or not any(k.startswith(key + ".") for k in layers)):
            return layers[key]
    return None


def unplaced(modules: Iterable[str], layers: Mapping[str, int]) -> list[str]:
    return sorted(m for m in modules if layer_of(m, layers) is None)


def back_edges(edges: Mapping[tuple[str, str], int], layers: Mapping[str, int]) -> list[tuple[str, str]]:
    """Edges from a module to a module of a higher layer."""
    bad = []
    for (src, dst) in edges:
        a, b = layer_of(src, layers), layer_of(dst, layers)
        if a is not None and b is not None and b > a:
            bad.append((src, dst))
    return sorted(bad)


def cycle_edges(edges: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Every edge that lies on an import cycle (both ends in one strongly connected component)."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    component: dict[str, int] = {}

    def visit(v: str) -> None:  # Tarjan's algorithm; the graph has a few hundred modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component[w] = index[v]
                if w == v:
                    break

    for v in graph:
        if v not in index:
            visit(v)
    return sorted((a, b) for a, b in edges if component[a] == component[b])


def _describe(pairs: Iterable[tuple[str, str]], edges: Mapping[tuple[str, str], int]) -> str:
    return "\n".join(f"  {a} -> {b} (line {edges[(a, b)]})" for a, b in pairs)


@pytest.fixture(scope="module")
def edges() -> dict[tuple[str, str], int]:
    return import_edges(SRC, PACKAGES)


def test_every_package_has_a_layer():
    missing = unplaced(module_files(SRC, PACKAGES), LAYERS)
    assert not missing, f"give these a layer in LAYERS (and the docstring): {missing}"


def test_no_import_goes_up_a_layer(edges):
    bad = [e for e in back_edges(edges, LAYERS) if e not in PENDING]
    assert not bad, "imports from a higher layer (move the shared code down, or pass it in):\n" + _describe(bad, edges)


def test_no_import_cycles(edges):
    bad = [e for e in cycle_edges(edges) if e not in PENDING]
    assert not bad, "import cycles (each edge below lies on one):\n" + _describe(bad, edges)


def test_pending_allowances_are_still_needed(edges):
    needed = set(back_edges(edges, LAYERS)) | set(cycle_edges(edges))
    stale = sorted(set(PENDING) - needed)
    assert not stale, f"these edges are gone: remove them from PENDING: {stale}"


# -- the checker itself, on a made-up package ---------------------------------------------------------


def _package(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


FAKE_LAYERS = {"memrl": 0, "memrl.low": 0, "memrl.high": 1}


def test_checker_finds_a_back_edge_inside_a_function(tmp_path):
    src = _package(tmp_path, {
        "memrl/__init__.py": "",
        "memrl/low/__init__.py": "",
        "memrl/low/a.py": "def f():\n    from memrl.high.b import g\n    return g\n",
        "memrl/high/__init__.py": "",
        "memrl/high/b.py": "from ..low import a\n\ndef g():\n    return a\n",
    })
    edges = import_edges(src, ["memrl"])
    assert edges == {("memrl.low.a", "memrl.high.b"): 2, ("memrl.high.b", "memrl.low.a"): 1}
    assert back_edges(edges, FAKE_LAYERS) == [("memrl.low.a", "memrl.high.b")]
    assert cycle_edges(edges) == [("memrl.high.b", "memrl.low.a"), ("memrl.low.a", "memrl.high.b")]


def test_checker_counts_type_checking_imports_but_not_import_module_strings(tmp_path):
    src = _package(tmp_path, {
        "memrl/__init__.py": "",
        "memrl/low.py": ("import importlib\nfrom typing import TYPE_CHECKING\n"
                         "if TYPE_CHECKING:\n    import memrl.high\n"
                         "plugin = importlib.import_module('memrl.high')\n"),
        "memrl/high.py": "from memrl import low\n",
    })
    edges = import_edges(src, ["memrl"])
    assert set(edges) == {("memrl.low", "memrl.high"), ("memrl.high", "memrl.low")}
    assert back_edges(edges, FAKE_LAYERS) == [("memrl.low", "memrl.high")]


def test_checker_passes_a_clean_package_and_flags_an_unplaced_one(tmp_path):
    src = _package(tmp_path, {
        "memrl/__init__.py": "",
        "memrl/low.py": "import json\n",
        "memrl/high.py": "from memrl.low import json\nfrom memrl import __version__\n",
        "memrl/new/__init__.py": "from memrl import low\n",
    })
    edges = import_edges(src, ["memrl"])
    assert back_edges(edges, FAKE_LAYERS) == [] and cycle_edges(edges) == []
    assert unplaced(module_files(src, ["memrl"]), FAKE_LAYERS) == ["memrl.new"]
