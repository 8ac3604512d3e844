"""No import cycle between the package's modules (docs/architecture.md).

grimp (installed with import-linter) builds the import graph of ``dsh_orchestra``: every
import statement of every module, at module level or inside a function, except those under
``if TYPE_CHECKING:``. A cycle is a strongly connected set of two or more modules in that
graph (a module and its package's ``__init__`` included); there must be none.
"""

from __future__ import annotations

import grimp


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected sets of two or more modules (Tarjan's algorithm, iteratively)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            for i in range(position, len(edges[node])):
                target = edges[node][i]
                if target not in index:
                    work.append((node, i + 1))
                    work.append((target, 0))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return found


def describe(graph: grimp.ImportGraph, component: list[str]) -> str:
    lines = []
    for importer in component:
        for imported in component:
            for detail in graph.get_import_details(importer=importer, imported=imported):
                lines.append(f"  {importer}:{detail['line_number']}: {detail['line_contents']}")
    return "\n".join(lines)


def test_the_cycle_finder_finds_cycles() -> None:
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c", "p.d"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    graph.add_import(importer="p.c", imported="p.a")
    graph.add_import(importer="p.d", imported="p.a")
    graph.add_import(importer="p", imported="p.d")
    graph.add_import(importer="p.d", imported="p")
    assert sorted(import_cycles(graph)) == [["p", "p.d"], ["p.a", "p.b", "p.c"]]


def test_no_import_cycle_between_modules() -> None:
    graph = grimp.build_graph("dsh_orchestra", cache_dir=None, exclude_type_checking_imports=True)
    assert len(graph.modules) > 50  # the whole package was read
    cycles = import_cycles(graph)
    assert cycles == [], "import cycles:\n" + "\n\n".join(describe(graph, c) for c in cycles)
