"""The project's import graph: no import circles between modules, and rooms (packages) on floors.

Every `import` statement of the project's packages counts, those inside functions included (a
function-level import is how a circle hides). The floors are written once, in docs/architecture.md
("Package order"): a package imports only packages of lower floors, never one of its own floor, and
every package of the project is on a floor.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ablations", "analysis", "math_data", "runners")
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The project modules ``path`` imports (``from a.b import c`` counts as ``a.b.c`` when that is a module,
    as ``a.b`` when it is a name defined there)."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
            names = submodules if len(submodules) == len(node.names) else [base, *submodules]
        else:
            continue
        found.update(name for name in names if name in modules)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    return {name: imported_modules(path, set(files)) - {name} for name, path in files.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one node (Tarjan), as sorted lists."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def floors(text: str) -> dict[str, int]:
    """The package -> floor table of the "Package order" section: numbered items, the packages in backticks
    before the first " — "."""
    section = text.split("## Package order", 1)[1].split("\n## ", 1)[0]
    table: dict[str, int] = {}
    for line in section.splitlines():
        if item := re.match(r"^(\d+)\. (.*?) — ", line):
            for package in re.findall(r"`([\w.]+)`", item.group(2)):
                table[package] = int(item.group(1))
    return table


def known_arrows_up(text: str) -> set[str]:
    """The "Known arrows up" section: ``a -> b`` per item (module names in backticks)."""
    if "## Known arrows up" not in text:
        return set()
    section = text.split("## Known arrows up", 1)[1].split("\n## ", 1)[0]
    return {f"{a} -> {b}" for a, b in re.findall(r"^- `([\w.]+)` -> `([\w.]+)`", section, flags=re.M)}


def package_of(module: str, table: dict[str, int]) -> str | None:
    """The longest package of the table that holds ``module``."""
    candidates = [p for p in table if module == p or module.startswith(p + ".")]
    return max(candidates, key=len) if candidates else None


def layer_violations(graph: dict[str, set[str]], table: dict[str, int]) -> list[str]:
    """Every import between packages that is not down to a lower floor."""
    bad = []
    for name, targets in graph.items():
        for target in targets:
            a, b = package_of(name, table), package_of(target, table)
            if a is None or b is None or a == b:
                continue
            if table[b] >= table[a]:
                kind = "within floor" if table[b] == table[a] else "upward"
                bad.append(f"{name} -> {target} ({kind}: {a} on floor {table[a]}, {b} on floor {table[b]})")
    return sorted(bad)


def test_the_cycle_finder_finds_a_two_module_circle():
    assert find_cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_the_floor_check_catches_an_arrow_up_and_one_within_a_floor():
    table = floors("## Package order\n\n1. `p` — low\n2. `q`, `r` — high\n3. `s` — top\n")
    assert table == {"p": 1, "q": 2, "r": 2, "s": 3}
    graph = {"p.a": {"q.b"}, "q.b": {"r.c", "p.a"}, "s": {"q.b"}, "s.x": {"s.y"}}
    assert layer_violations(graph, table) == ["p.a -> q.b (upward: p on floor 1, q on floor 2)",
                                              "q.b -> r.c (within floor: q on floor 2, r on floor 2)"]
    assert known_arrows_up("## Known arrows up\n\n- `p.a` -> `q.b` — why\n\n## Next\n- `x` -> `y`\n") == {"p.a -> q.b"}


def test_no_import_circles():
    assert find_cycles(import_graph()) == []


def test_every_package_is_on_a_floor():
    table = floors(ARCHITECTURE.read_text())
    packages = {module_name(p.parent / "__init__.py") for package in PACKAGES for p in (ROOT / package).rglob("__init__.py")}
    unplaced = sorted(p for p in packages if package_of(p, table) is None or (p.count(".") == 1 and p not in table
                                                                               and p.startswith("runners.")))
    assert unplaced == [], "rooms of runners/ missing from docs/architecture.md's package order"


def test_packages_import_only_lower_floors():
    text = ARCHITECTURE.read_text()
    found = layer_violations(import_graph(), floors(text))
    known = known_arrows_up(text)
    assert [v for v in found if v.split(" (")[0] not in known] == []
    assert sorted(known - {v.split(" (")[0] for v in found}) == [], "listed as a known arrow up but gone: remove it"


def test_runners_never_import_analysis():
    upward = sorted(f"{name} -> {target}" for name, targets in import_graph().items() if name.startswith("runners")
                    for target in targets if target.startswith("analysis"))
    assert upward == []


def test_the_capacity_plans_copy_of_the_head_layout_agrees():
    """The capacity plan keeps its own figure of the head's bytes per id so that it imports no backend."""
    from runners.capacity.estimate import HEAD_BYTES_PER_ID
    from runners.verl_side.head.head_layout import BYTES_PER_TOKEN_PER_ID

    assert HEAD_BYTES_PER_ID == BYTES_PER_TOKEN_PER_ID


def test_a_models_shape_is_read_without_the_planner():
    """The model-shape lookup lives in ``runners.config.model_shapes``, below the capacity plan: a module outside
    ``runners.capacity`` imports the planner only for a plan (``plan``, ``estimate``), never one of its parts."""
    plan_modules = {"runners.capacity", "runners.capacity.plan", "runners.capacity.estimate"}
    parts = sorted(f"{name} -> {target}" for name, targets in import_graph().items()
                   if not name.startswith("runners.capacity")
                   for target in targets if target.startswith("runners.capacity") and target not in plan_modules)
    assert parts == []
    assert "runners.config.model_shapes" in import_graph()
    assert not (ROOT / "runners" / "capacity" / "shapes.py").exists()


def package_graph(graph: dict[str, set[str]], table: dict[str, int]) -> dict[str, set[str]]:
    """The import graph between the packages of the floor table (a package's own imports left out)."""
    out: dict[str, set[str]] = {}
    for name, targets in graph.items():
        if (a := package_of(name, table)) is not None:
            out.setdefault(a, set()).update(b for t in targets if (b := package_of(t, table)) not in (None, a))
    return out


def test_the_package_cycle_finder_sees_a_circle_through_two_modules():
    table = {"p": 1, "q": 2}
    assert find_cycles(package_graph({"p.a": {"q.b"}, "q.c": {"p.d"}, "q.b": set(), "p.d": set()}, table)) == [["p", "q"]]


def test_no_circle_between_packages():
    assert find_cycles(package_graph(import_graph(), floors(ARCHITECTURE.read_text()))) == []


def budgets(text: str) -> dict[str, int]:
    """The "Line budgets of the verl side" table: package -> budget."""
    section = text.split("## Line budgets of the verl side", 1)[1].split("\n## ", 1)[0]
    return {p: int(n) for p, n in re.findall(r"^\| `([\w.]+)` \| (\d+) \|", section, flags=re.M)}


def test_each_verl_sub_package_is_within_its_line_budget():
    table = budgets(ARCHITECTURE.read_text())
    packages = {f"runners.verl_side.{p.name}" for p in (ROOT / "runners" / "verl_side").iterdir() if (p / "__init__.py").is_file()}
    assert sorted(packages) == sorted(table), "every sub-package of runners/verl_side/ has a budget in docs/architecture.md"
    lines = {p: sum(len(f.read_text().splitlines()) for f in (ROOT / p.replace(".", "/")).rglob("*.py")) for p in table}
    assert {p: n for p, n in lines.items() if n > table[p]} == {}


def test_no_room_of_runners_shadows_an_installed_package():
    """``python runners/launch.py`` puts runners/ first on sys.path: a room named like an installed package (a
    ``runners/verl/`` would be found as ``verl``) hides that package from the launcher."""
    import importlib.util

    rooms = sorted(p.name for p in (ROOT / "runners").iterdir() if (p / "__init__.py").is_file())
    assert [r for r in rooms if importlib.util.find_spec(r) is not None] == []
