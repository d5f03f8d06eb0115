"""Import-linter contract types of our own (pyproject.toml, `contract_types`).

`no_cycles`: no circle of imports among the modules of a package. import-linter's own
`acyclic_siblings` looks at packages (a child package counts as one node with everything
under it), so it cannot say that two modules import each other, and it would also refuse
sibling packages that merely depend on each other through different modules. This contract
works on modules: it finds the strongly connected components of the import graph (every
import counts, those under TYPE_CHECKING and inside functions included, as grimp finds
them) and, for each, lists the shortest circle through each of its modules, with the lines
that import.
"""

from __future__ import annotations

from collections import deque
from itertools import pairwise

import grimp
from importlinter import Contract, ContractCheck, fields, output
from rich.markup import escape


class NoCyclesContract(Contract):
    """No module of `packages` reaches itself again by following imports.

    Configuration options:
        - packages: the packages whose modules must not import each other in a circle.
    """

    type_name = "no_cycles"

    packages = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        circles = []
        for package in self.packages:  # type: ignore[attr-defined]
            modules = {package.name} | graph.find_descendants(package.name)
            imports = {
                module: sorted(graph.find_modules_directly_imported_by(module) & modules)
                for module in sorted(modules)
            }
            for component in _strongly_connected(imports):
                for cycle in _circles(component, imports):
                    circles.append([_hop(graph, a, b) for a, b in pairwise(cycle)])
        return ContractCheck(kept=not circles, metadata={"circles": circles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for circle in check.metadata["circles"]:
            chain = " -> ".join([importer for importer, _, _ in circle] + [circle[0][0]])
            output.print_error(escape(chain))
            for importer, imported, lines in circle:
                output.indent_cursor()
                output.print_error(escape(f"{importer} -> {imported} ({lines})"), bold=False)
            output.new_line()


def _strongly_connected(imports: dict[str, list[str]]) -> list[list[str]]:
    """The groups of modules that import each other in a circle (Tarjan's algorithm,
    without recursion); a module that imports itself is a group of one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in imports:
        if root in index:
            continue
        work = [(root, iter(imports[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(imports[successor])))
                    break
                if successor in on_stack:
                    low[module] = min(low[module], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == module:
                            break
                    if len(group) > 1 or module in imports[module]:
                        found.append(sorted(group))
    return sorted(found)


def _circles(component: list[str], imports: dict[str, list[str]]) -> list[list[str]]:
    """The shortest circle through each module of `component` (as a list of modules that
    starts and ends with the same one), each circle once."""
    members = set(component)
    seen = set()
    circles = []
    for start in component:
        # breadth first from `start` back to itself, inside the component
        came_from: dict[str, str] = {}
        queue = deque([start])
        while queue:
            module = queue.popleft()
            if start in imports[module]:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                cycle = [start, *reversed(path[:-1]), start] if module != start else [start] * 2
                break
            for successor in imports[module]:
                if successor in members and successor not in came_from and successor != start:
                    came_from[successor] = module
                    queue.append(successor)
        else:
            continue
        turn = cycle.index(min(cycle[:-1]))  # the same circle, whichever module it starts at
        key = tuple(cycle[turn:-1] + cycle[:turn])
        if key not in seen:
            seen.add(key)
            circles.append([*key, key[0]])
    return circles


def _hop(graph: grimp.ImportGraph, importer: str, imported: str) -> tuple[str, str, str]:
    details = graph.get_import_details(importer=importer, imported=imported)
    lines = ", ".join(f"l.{d['line_number']}: {d['line_contents']}" for d in details)
    return importer, imported, lines
