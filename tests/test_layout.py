"""The layout of src/nobroker: who may import whom, what each module says of itself, and its size.

Owns the rules README's "Development" section states, read from the source
with ast (nothing is imported or run):

- a module imports only modules below it: the top-level units rank as
  ``UNIT_RANKS`` lists them, and inside a package a module imports only the
  modules listed above it in the package's ``__init__`` docstring;
- ``postgres/`` never imports ``filestore/`` (nor the other way round), and
  the apps (worker, dashboard, cli) reach a storage only through the public
  Queue: of the engines they may import ``nobroker.filestore.admin`` alone;
- every module's docstring says what it owns ("Owns:") and names exactly the
  project modules it imports ("Imports: a, b, c.");
- no module over ``MAX_MODULE_LINES`` lines, no function over
  ``MAX_FUNCTION_LINES`` unless its docstring calls it a declarative table.

Every import counts, also one inside a function or under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
import re
import shutil
import tempfile
import textwrap
import unittest
from dataclasses import dataclass, field
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
README = SRC.parent / "README.md"
PACKAGE = "nobroker"

#: The top-level units, bottom first: a unit imports only units of a lower rank.
UNIT_RANKS = {
    "errors": 0,
    "cron": 1,
    "waiting": 1,
    "jobs": 2,
    "codec": 3,
    "checks": 4,
    "schedules": 5,
    "announcements": 5,
    "limits": 5,
    "addresses": 5,
    "storage": 6,
    "filestore": 7,
    "postgres": 7,
    "locations": 8,
    "explain": 8,
    "queue": 9,
    "maintenance": 10,
    "worker": 11,
    "dashboard": 12,
    "cli": 13,
    "__init__": 14,
    "__main__": 15,
}
ENGINES = frozenset({"filestore", "postgres"})
APPS = frozenset({"worker", "dashboard", "cli"})
#: The one engine module the apps may import: inspect, verify and repair of the file storage.
APP_ENGINE_DOOR = f"{PACKAGE}.filestore.admin"
#: The house figures are "about 450" lines a module and "about 70" a function;
#: the test fails past them with a tenth of slack, so a module near the figure
#: is split when it next grows, not by a one-line change.
MAX_MODULE_LINES = 495
MAX_FUNCTION_LINES = 77
TABLE_MARK = "declarative table"
#: A line of a package's order: four spaces, the file name, two or more spaces, what it holds.
ORDER_LINE = re.compile(r"^ {4}(\w+)\.py {2,}\S")
IMPORTS_SENTENCE = re.compile(r"Imports:(.*?)(?:\.\s|\.$)", re.S)


@dataclass
class Module:
    name: str  # dotted, e.g. nobroker.filestore.log
    path: Path
    tree: ast.Module
    lines: int
    imports: dict[str, int] = field(default_factory=dict)  # imported project module -> first line

    @property
    def package(self) -> str:
        return self.name if self.path.name == "__init__.py" else self.name.rpartition(".")[0]

    @property
    def unit(self) -> str:
        parts = self.name.split(".")
        return parts[1] if len(parts) > 1 else "__init__"


def load_modules(src: Path) -> dict[str, Module]:
    modules = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        rel = path.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        text = path.read_text(encoding="utf-8")
        name = ".".join(parts)
        modules[name] = Module(name, path, ast.parse(text, str(path)), len(text.splitlines()))
    for module in modules.values():
        module.imports = imported_modules(module, modules)
    return modules


def imported_modules(module: Module, modules: dict[str, Module]) -> dict[str, int]:
    """Every project module ``module`` imports (``from x import sub`` counts as x.sub when sub is a module)."""
    found: dict[str, int] = {}
    for node in ast.walk(module.tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in modules else base)
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                assert target in modules, f"{module.name} imports {target}, which is not a module here"
                if target != module.name:
                    found.setdefault(target, node.lineno)
    return found


def package_order(module: Module) -> list[str]:
    """The modules of a package in its docstring's order (a module imports only those above it)."""
    doc = ast.get_docstring(module.tree) or ""
    return [m.group(1) for line in doc.splitlines() if (m := ORDER_LINE.match(line)) and m.group(1) != "__init__"]


def layer_problems(modules: dict[str, Module]) -> list[str]:
    problems = []
    orders = {m.name: package_order(m) for m in modules.values() if m.path.name == "__init__.py" and m.name != PACKAGE}
    for name, order in orders.items():
        members = {m.name.rpartition(".")[2] for m in modules.values() if m.package == name and m.name != name}
        if set(order) != members:
            problems.append(f"{name.replace('.', '/')}/__init__.py lists {sorted(order)} but the package holds {sorted(members)}")
    for module in modules.values():
        for target, line in module.imports.items():
            why = import_problem(module, modules[target], orders)
            if why:
                problems.append(f"{module.name} imports {target}: {why} (line {line})")
    return problems


def import_problem(module: Module, target: Module, orders: dict[str, list[str]]) -> str | None:
    if target.name == PACKAGE:  # the facade of public names: for the apps, which use Queue as a user does
        return None if module.unit in APPS else "only the apps may import the package's public names"
    if module.unit == target.unit:
        if module.path.name == "__init__.py":
            return None  # a package's face names what its modules define
        if target.name == module.package:
            return "imports its own package's __init__"
        order = orders.get(module.package)
        if order is None:
            return f"{module.package}/__init__.py lists no order for its modules"
        mine, theirs = module.name.rpartition(".")[2], target.name.rpartition(".")[2]
        if mine in order and theirs in order and order.index(theirs) < order.index(mine):
            return None
        return f"{theirs} is not listed above {mine} in {module.package.replace('.', '/')}/__init__.py"
    if UNIT_RANKS[target.unit] >= UNIT_RANKS[module.unit]:
        return f"{target.unit} is not below {module.unit}"
    if module.unit in APPS and target.unit in ENGINES and target.name != APP_ENGINE_DOOR:
        return f"the apps reach a storage through the public Queue (of the engines only {APP_ENGINE_DOOR})"
    return None


def declared_imports(module: Module) -> set[str] | None:
    """The names in the docstring's "Imports:" sentence (parenthesised remarks dropped), or None without one."""
    doc = ast.get_docstring(module.tree) or ""
    match = IMPORTS_SENTENCE.search(doc)
    if not match:
        return None
    text = re.sub(r"\([^)]*\)", "", " ".join(match.group(1).split()))
    if text.strip().startswith("nothing"):
        return set()
    names = set()
    for item in re.split(r",|\band\b", text):
        words = item.split()
        if words:
            names.add(words[0])
    return names


def shown_name(module: Module, target: str) -> str:
    """How a header names ``target``: a sibling by its file name, anything else by its path below the package."""
    if target == PACKAGE:
        return PACKAGE
    if target.rpartition(".")[0] == module.package and module.package != PACKAGE:
        return target.rpartition(".")[2]
    return target[len(PACKAGE) + 1 :]


def header_problems(modules: dict[str, Module]) -> list[str]:
    problems = []
    for module in modules.values():
        doc = ast.get_docstring(module.tree) or ""
        if "Owns" not in doc:
            problems.append(f"{module.name}: the docstring does not say what it owns (Owns: ...)")
        declared = declared_imports(module)
        if declared is None:
            problems.append(f"{module.name}: the docstring has no 'Imports: ...' sentence")
            continue
        real = {shown_name(module, t) for t in module.imports}
        if declared != real:
            problems.append(
                f"{module.name}: 'Imports:' says {sorted(declared)} but it imports {sorted(real)}"
                f" (missing {sorted(real - declared)}, not imported {sorted(declared - real)})"
            )
    return problems


def size_problems(modules: dict[str, Module]) -> list[str]:
    problems = []
    for module in modules.values():
        if module.lines > MAX_MODULE_LINES:
            problems.append(f"{module.name}: {module.lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES and TABLE_MARK not in (ast.get_docstring(node) or ""):
                    problems.append(f"{module.name}.{node.name}: {length} lines (at most {MAX_FUNCTION_LINES})")
    return problems


def readme_tree(readme: Path) -> dict[str, list[str]]:
    """README's tree of src/nobroker: folder -> the modules its line lists, in order."""
    tree = {}
    for line in readme.read_text(encoding="utf-8").splitlines():
        match = re.match(rf"^src/{PACKAGE}/(\w*/?)\s.*: (\S.*)$", line)
        if match:
            tree[match.group(1).rstrip("/")] = [name.strip().rstrip("/") for name in re.split("[→|]", match.group(2))]
    return tree


def readme_problems(modules: dict[str, Module], readme: Path) -> list[str]:
    tree = readme_tree(readme)
    problems = []
    packages = sorted(m.unit for m in modules.values() if m.path.name == "__init__.py" and m.name != PACKAGE)
    for package in packages:
        listed, real = tree.get(package), package_order(modules[f"{PACKAGE}.{package}"])
        if listed != real:
            problems.append(f"README's line for src/{PACKAGE}/{package}/ lists {listed}, its __init__ {real}")
    top = tree.get("", [])
    units = sorted(set(UNIT_RANKS) - {"__init__", "__main__"}, key=UNIT_RANKS.__getitem__)
    if sorted(top) != sorted(units) or [UNIT_RANKS[u] for u in top if u in UNIT_RANKS] != sorted(UNIT_RANKS[u] for u in top if u in UNIT_RANKS):
        problems.append(f"README's line for src/{PACKAGE}/ lists {top}; the units, bottom first, are {units}")
    return problems


def report(problems: list[str]) -> str:
    return "\n" + "\n".join(problems)


class LayoutTest(unittest.TestCase):
    maxDiff = None

    def setUp(self) -> None:
        self.modules = load_modules(SRC)

    def test_every_import_points_down(self) -> None:
        problems = layer_problems(self.modules)
        self.assertEqual([], problems, report(problems))

    def test_every_header_names_what_it_owns_and_imports(self) -> None:
        problems = header_problems(self.modules)
        self.assertEqual([], problems, report(problems))

    def test_modules_and_functions_stay_small(self) -> None:
        problems = size_problems(self.modules)
        self.assertEqual([], problems, report(problems))

    def test_readme_draws_the_tree_as_it_is(self) -> None:
        problems = readme_problems(self.modules, README)
        self.assertEqual([], problems, report(problems))

    def test_every_unit_has_a_rank(self) -> None:
        units = {m.unit for m in self.modules.values()}
        self.assertEqual(set(), units - set(UNIT_RANKS), "a new top-level module needs its place in UNIT_RANKS")


class LayoutTeethTest(unittest.TestCase):
    """The checks above fail on a tree that breaks each rule (so they cannot pass by reading nothing)."""

    PROBE = {
        "nobroker/__init__.py": '"""Owns: the names. Imports: queue."""\nfrom .queue import Queue\n',
        "nobroker/errors.py": '"""Owns: errors. Imports: jobs."""\nfrom . import jobs\n',  # upward
        "nobroker/jobs.py": '"""Owns: jobs. Imports: nothing from nobroker."""\nfrom .errors import X\n',  # header lies
        "nobroker/queue.py": '"""Owns: the facade. Imports: filestore."""\nfrom .filestore import FileStorage\n',
        "nobroker/filestore/__init__.py": textwrap.dedent(
            '''\
            """Owns nothing itself.

            The package, in its order (a module imports only modules above it):

                log.py      one file
                storage.py  the storage

            Imports: storage.
            """
            from .storage import FileStorage
            '''
        ),
        "nobroker/filestore/log.py": '"""Owns: the log. Imports: storage."""\nfrom .storage import FileStorage\n',  # sideways up
        "nobroker/filestore/storage.py": '"""Owns: the storage. Imports: log, postgres."""\nfrom . import log\nfrom .. import postgres\n',
        "nobroker/postgres/__init__.py": '"""Owns nothing.\n\nThe package, in its order (a module imports only modules above it):\n\nImports: nothing from nobroker."""\n',
        "nobroker/worker/__init__.py": '"""Owns nothing.\n\nThe package, in its order (a module imports only modules above it):\n\n    run.py   the loop\n\nImports: run."""\nfrom .run import W\n',
        "nobroker/worker/run.py": '"""Owns: the loop. Imports: filestore.log."""\n\ndef f():\n    from ..filestore import log\n' + "    x = 1\n" * 80,
    }

    def test_the_checks_find_every_broken_rule(self) -> None:
        root = Path(tempfile.mkdtemp(prefix="nobroker-layout-"))
        self.addCleanup(shutil.rmtree, root)
        for rel, text in self.PROBE.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        modules = load_modules(root)
        layers = "\n".join(layer_problems(modules))
        self.assertIn("nobroker.errors imports nobroker.jobs: jobs is not below errors", layers)
        self.assertIn("nobroker.filestore.log imports nobroker.filestore.storage: storage is not listed above log", layers)
        self.assertIn("nobroker.filestore.storage imports nobroker.postgres: postgres is not below filestore", layers)
        self.assertIn("nobroker.worker.run imports nobroker.filestore.log: the apps reach a storage", layers)
        self.assertNotIn("nobroker.queue imports", layers)
        headers = "\n".join(header_problems(modules))
        self.assertIn("nobroker.jobs: 'Imports:' says [] but it imports ['errors']", headers)
        self.assertNotIn("nobroker.queue:", headers)
        readme = root / "README.md"
        readme.write_text("src/nobroker/filestore/   the engine: storage → log\n", encoding="utf-8")
        tree = "\n".join(readme_problems(modules, readme))
        self.assertIn("src/nobroker/filestore/ lists ['storage', 'log'], its __init__ ['log', 'storage']", tree)
        self.assertIn("README's line for src/nobroker/postgres/ lists None", tree)
        sizes = "\n".join(size_problems(modules))
        self.assertIn("nobroker.worker.run.f: 82 lines", sizes)


if __name__ == "__main__":
    unittest.main()
