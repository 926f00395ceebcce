"""The package layout is the architecture: imports point one way and close no cycle.

Layers, lowest first: the vocabulary modules at the top of `cronctl/`, then `schedule`,
`jobs`, `store`, `context`, `loop`, `ops`, `cli`, and the ways in (`entry`, `__main__`).
A module may import its own layer and the layers below it. Two packages stand aside:
`proc` (child processes) imports only the vocabulary and is imported only by `loop`,
`ops` and `cli`; `interop` (crontab, systemd, Kubernetes) imports the vocabulary,
`schedule` and `jobs`, and is imported only by `ops` and `cli`. Imports inside functions
count the same as those at the top of a module.

Inside `store`, PostgreSQL stays behind the backend seam (store/backend.py): no module
outside `cronctl/store/` imports `cronctl.store.pg` or the driver, `psycopg`; what differs
by store is asked of `Context.backend` (and `ctx.cluster`, None on the JSON store).
"""

from __future__ import annotations

import ast
from pathlib import Path

import cronctl

PACKAGE = Path(cronctl.__file__).parent
VOCABULARY = {"errors", "models", "durations", "timefmt", "clock", "paths", "__init__"}
RANKS = {"vocabulary": 0, "schedule": 1, "jobs": 2, "store": 3, "context": 4, "loop": 5,
         "ops": 6, "cli": 7, "entry": 8, "__main__": 8}
PROC_USERS = {"loop", "ops", "cli"}
INTEROP_USES = {"vocabulary", "schedule", "jobs", "interop"}
INTEROP_USERS = {"ops", "cli"}


def layer_of(module: str) -> str:
    """`cronctl.store.audit` -> `store`; a top-level vocabulary module -> `vocabulary`."""
    first = module.split(".")[1] if module.count(".") else "__init__"
    return "vocabulary" if first in VOCABULARY else first


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every cronctl module `path` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("cronctl"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cronctl"):
            # `from cronctl.store import audit` imports the module cronctl.store.audit.
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                is_module = (PACKAGE.parent / candidate.replace(".", "/")).with_suffix(".py").exists()
                found.add(candidate if is_module else node.module)
    return found - {"cronctl"}


def import_graph() -> dict[str, set[str]]:
    return {module_name(path): imports_of(path) for path in sorted(PACKAGE.rglob("*.py"))}


def allowed(importer: str, imported: str) -> bool:
    src, dst = layer_of(importer), layer_of(imported)
    if src == dst:
        return True
    if dst == "proc":
        return src in PROC_USERS
    if src == "proc":
        return dst == "vocabulary"
    if dst == "interop":
        return src in INTEROP_USERS
    if src == "interop":
        return dst in INTEROP_USES
    return RANKS[dst] <= RANKS[src]


def postgres_imports(source: str) -> set[str]:
    """What `source` imports of PostgreSQL: `cronctl.store.pg...` and `psycopg...`, however spelt."""
    named: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            # `from cronctl.store import pg` names the package cronctl.store.pg.
            named.update({node.module, *(f"{node.module}.{alias.name}" for alias in node.names)})
    return {name for name in named if _is_postgres(name)}


def _is_postgres(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in ("cronctl.store.pg", "psycopg"))


def test_only_the_store_imports_postgresql() -> None:
    store = PACKAGE / "store"
    wrong = [f"{module_name(path)} -> {imported}"
             for path in sorted(PACKAGE.rglob("*.py")) if store not in path.parents
             for imported in sorted(postgres_imports(path.read_text()))]
    assert wrong == []


def test_the_postgresql_rule_catches_every_spelling() -> None:
    for source in ("import psycopg", "from psycopg.types.json import Jsonb", "from cronctl.store import pg",
                   "from cronctl.store.pg.leases import PgLeaseStore", "import cronctl.store.pg.connect",
                   "def f():\n    from cronctl.store.pg import loops"):
        assert postgres_imports(source), source
    assert not postgres_imports("from cronctl.store.backend import selected_url\nimport psycopgx")


def test_every_import_points_down_the_layers() -> None:
    wrong = [f"{importer} -> {imported}"
             for importer, imported_set in import_graph().items()
             for imported in sorted(imported_set) if not allowed(importer, imported)]
    assert wrong == []


def test_no_import_cycle_between_modules() -> None:
    graph = import_graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(graph.get(module, ())):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_every_subpackage_init_is_empty() -> None:
    # Importing a package must not import its modules: the status --json fast path
    # imports only what it reads.
    inits = [p for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE]
    assert inits and all(p.read_text().strip() == "" for p in inits)


def test_the_layer_rules_catch_a_wrong_import() -> None:
    assert not allowed("cronctl.store.jsonstore", "cronctl.loop.engine")
    assert not allowed("cronctl.proc.supervisor", "cronctl.store.claims")
    assert not allowed("cronctl.store.claims", "cronctl.proc.identity")
    assert not allowed("cronctl.interop.translate", "cronctl.store.audit")
    assert allowed("cronctl.loop.engine", "cronctl.proc.supervisor")
    assert allowed("cronctl.cli.app", "cronctl.ops.status")
