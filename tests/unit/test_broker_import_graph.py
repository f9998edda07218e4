"""The broker package has no import circles (issue 18): its components talk through
narrow interfaces wired at start-up, so no module needs one that needs it back.

How: grimp (import-linter's graph library) builds the import graph of
`brokergroup_broker`, TYPE_CHECKING imports included; Tarjan's algorithm finds its
strongly connected components; any with more than one module is a circle."""

from __future__ import annotations

import grimp


def _circles(package: str) -> list[list[str]]:
    graph = grimp.build_graph(package, cache_dir=None)
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & set(modules)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    # Iterative Tarjan: the graph is small, but recursion depth should not depend on it.
    for root in modules:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            targets = edges[v]
            if i < len(targets):
                work.append((v, i + 1))
                w = targets[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return found


def test_the_broker_package_has_no_import_circles() -> None:
    assert _circles("brokergroup_broker") == []
