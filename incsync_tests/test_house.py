"""The house (issue 17): no import cycle among incsync's modules, and modules short enough to read."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "incsync"
MAX_LINES = 300
# Longer than MAX_LINES when the limit came in: to be split, never to grow a new member.
LONGER = {
}


def _modules(root: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_only(tree: ast.AST) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:``: names for annotations, never imported at run time."""
    nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            nodes.update(id(inner) for child in node.body for inner in ast.walk(child))
    return nodes


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of the package at ``root`` it imports at run time, at any depth (a function's
    lazy imports too).

    ``from incsync.a import b`` names module ``incsync.a.b`` when there is one, else ``incsync.a``.
    """
    modules = _modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        skip = _type_only(tree)
        named: list[str] = []
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                named += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named += [f"{node.module}.{alias.name}" for alias in node.names]
        graph[module] = {target for name in named if (target := resolve(name)) and target != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_the_cycle_finder_finds_a_cycle_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_sees_lazy_imports_and_leaves_type_only_ones_out() -> None:
    graph = import_graph()
    assert "incsync.core.vendor_sql" in graph["incsync.config.recipients_table"]  # imported inside a function
    assert "incsync.config.model" not in graph["incsync.config.recipients_table"]  # under `if TYPE_CHECKING:` only


def _cycles_report(graph: dict[str, set[str]], found: list[list[str]]) -> str:
    return "\n".join(
        " <-> ".join(group) + "\n" + "\n".join(f"  {m} imports {sorted(graph[m] & set(group))}" for m in group)
        for group in found
    )


def test_no_import_cycle_among_incsync_modules() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert found == [], _cycles_report(graph, found)


def test_modules_stay_under_the_length_limit() -> None:
    lengths = {str(path.relative_to(PACKAGE)): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert {name: n for name, n in lengths.items() if n > MAX_LINES and name not in LONGER} == {}
    assert sorted(name for name in LONGER if lengths.get(name, 0) <= MAX_LINES) == []  # split: take it off the list


# Issue 28: packages that read as the flow. Each package may import only those below it in LAYERS
# (``cli`` and ``worker`` at the top); top-level modules (errors, paths, definitions) sit outside.
LAYERS = ["core", "storage", "spark", "config", "secrets", "sources", "staging", "destinations", "integrity", "transfer",
          "sharing", "onboarding", "operations", "orchestration", "worker", "cli"]
# The packages that import Dagster, the top of LAYERS: ``operations`` on runs and the instance,
# ``orchestration``'s definitions built on them, and the two that launch runs. The engine below never does.
DAGSTER = ["operations", "orchestration", "worker", "cli"]
ENGINE = LAYERS[: LAYERS.index(DAGSTER[0])]
MAX_FLAT_MODULES = 12


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else None


def test_every_module_lives_in_a_package_of_the_flow_but_a_dozen() -> None:
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= MAX_FLAT_MODULES, flat
    packages = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert packages == sorted(LAYERS)


def test_packages_import_only_downwards() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        for target in targets
        if (a := _package(module)) and (b := _package(target)) and a != b and rank[a] < rank[b]
    )
    assert upward == []


def test_every_package_says_what_it_owns() -> None:
    missing = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("__init__.py")
               if p.parent != PACKAGE and len((ast.get_docstring(ast.parse(p.read_text())) or "").split()) < 8]
    assert missing == []


def _imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_dagster_stays_in_operations_orchestration_worker_cli() -> None:
    assert LAYERS[-len(DAGSTER):] == DAGSTER  # the engine, every package below them, is LAYERS' start
    found = sorted(
        str(path.relative_to(PACKAGE))
        for package in ENGINE
        for path in (PACKAGE / package).rglob("*.py")
        if any(name == "dagster" or name.startswith(("dagster.", "dagster_")) for name in _imports_of(path))
    )
    assert found == []


def test_the_io_manager_publishes_without_reading_sources() -> None:
    graph = import_graph()
    assert sorted(t for t in graph["incsync.orchestration.io_manager"] if t.startswith("incsync.sources")) == []


def test_no_module_reaches_into_argparse_private_names() -> None:
    found = sorted(
        f"{path.relative_to(PACKAGE)}: argparse.{node.attr}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and ast.unparse(node.value) == "argparse"
    )
    assert found == []


TESTS = PACKAGE.parent / "incsync_tests"


def test_the_tests_mirror_the_packages() -> None:
    # by top-level folder: a package's tests may have folders of their own (destinations/conformance)
    folders = sorted({p.relative_to(TESTS).parts[0] for p in TESTS.rglob("test_*.py") if p.parent != TESTS})
    assert sorted(set(folders) - {"faults"}) == sorted(LAYERS)
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == ["test_house.py"]


def test_the_tests_helpers_live_in_one_support_package() -> None:
    """Beside the package folders, the top of ``incsync_tests/`` holds only the shared fixtures and this
    file; helpers that several folders use are modules of ``incsync_tests/support/``."""
    assert sorted(p.name for p in TESTS.glob("*.py")) == ["__init__.py", "conftest.py", "test_house.py"]
    folders = sorted(p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
    assert folders == sorted([*LAYERS, "faults", "support"])
    assert (TESTS / "support" / "__init__.py").is_file()


def test_no_import_cycle_among_the_tests_modules() -> None:
    graph = import_graph(TESTS)
    found = cycles(graph)
    assert found == [], _cycles_report(graph, found)


def test_no_helper_imports_a_conftest() -> None:
    """Fixtures reach a test through pytest; what a conftest and the tests share lives in ``support/``."""
    found = sorted(f"{module} imports {target}" for module, targets in import_graph(TESTS).items()
                   if module.startswith("incsync_tests.support") for target in targets
                   if target.rpartition(".")[2] == "conftest")
    assert found == []


# One destination contract: every kind's special cases live in its own folder, so outside
# ``destinations/`` (the registry among them) and the kinds' config models no code names a kind, tests a
# kind's class or reaches into a destination's private members. Adding a kind touches those homes alone
# (docs/architecture.md#add-a-destination-kind).
DESTINATION_HOME = ("destinations/", "config/destinations/")


def _destination_kinds() -> set[str]:
    from incsync.destinations.registry import KINDS

    return set(KINDS)


def _destination_classes() -> set[str]:
    import incsync.config.destinations as configs
    from incsync.destinations.registry import KINDS

    classes = {target.partition(":")[2] for target in KINDS.values()}
    return classes | {name for name in vars(configs) if name.endswith("DestinationConfig")}


def _names_a_kind(node: ast.AST, kinds: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in kinds
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_names_a_kind(e, kinds) for e in node.elts)
    return False


def destination_switches(source: str, *, kinds: set[str], classes: set[str]) -> list[str]:
    """Each comparison of a ``kind`` with a destination kind's name, ``isinstance`` on a destination class
    (or its config model) and private member of a destination in ``source``, as ``line: code``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(ast.unparse(s).split(".")[-1] == "kind" for s in sides) and any(_names_a_kind(s, kinds) for s in sides):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance" and len(node.args) == 2:
            named = {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Name | ast.Attribute)}
            if named & classes:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value).split(".")[-1].split("(")[0]
            if owner in ("destination", "dest", "target_destination") or owner.endswith("_destination"):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_destination_switch_finder_finds_each_form() -> None:
    source = (
        "if destination.kind == 'postgres': pass\n"
        "if config.kind in ('duckdb', 'iceberg'): pass\n"
        "if isinstance(d, DeltaDestination | ObjectStorageDestination): pass\n"
        "if isinstance(c, PostgresDestinationConfig): pass\n"
        "with self.destination._connect() as conn: pass\n"
        "if kind in ('union_tag_invalid',): pass\n"
        "if source.vendor == 'postgres': pass\n"
        "if destination.capabilities.infinities: pass\n"
    )
    found = destination_switches(source, kinds=_destination_kinds(), classes=_destination_classes())
    assert [line.split(":")[0] for line in found] == ["1", "2", "3", "4", "5"], found


def test_no_destination_kind_switch_outside_the_destinations() -> None:
    kinds, classes = _destination_kinds(), _destination_classes()
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not str(path.relative_to(PACKAGE)).startswith(DESTINATION_HOME)
        for line in destination_switches(path.read_text(), kinds=kinds, classes=classes)
    ]
    assert found == []


# Where a kind's name is written as a literal outside the homes, adding a kind means editing that place too.
# Some kind names also name other things, and there a literal is no kind: the source vendors
# (``config/sources.py``) and Delta, the table format sharing serves. The demo writes a sample file, which
# names its kinds as a user's file does.
OTHER_MEANINGS = {"delta"}
KINDS_AS_DATA = ("cli/demo.py",)


def _kinds_named_nowhere_else() -> set[str]:
    import typing

    from incsync.config.destinations import DESTINATION_MODELS
    from incsync.config.sources import JdbcSourceConfig, LakeSourceConfig

    vendors = {v for cls in (JdbcSourceConfig, LakeSourceConfig) for v in typing.get_args(cls.model_fields["vendor"].annotation)}
    return set(DESTINATION_MODELS) - vendors - OTHER_MEANINGS


def kind_literals(source: str, kinds: set[str]) -> list[str]:
    """Each string literal of ``source`` that is exactly a kind's name, as ``line: name``."""
    found = [node for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in kinds]
    return [f"{node.lineno}: {node.value}" for node in sorted(found, key=lambda n: (n.lineno, n.col_offset))]


def test_the_kind_literal_finder_finds_a_kind_and_nothing_else() -> None:
    source = 'KINDS = ("duckdb", "iceberg")\nif vendor == "postgres": pass\nshown = "a duckdb file"\nx = "object_storage"\n'
    assert kind_literals(source, _kinds_named_nowhere_else()) == ["1: duckdb", "1: iceberg", "4: object_storage"]


def test_no_module_outside_the_destinations_names_a_kind() -> None:
    kinds = _kinds_named_nowhere_else()
    assert kinds >= {"object_storage", "duckdb", "iceberg"}
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not str(path.relative_to(PACKAGE)).startswith((*DESTINATION_HOME, *KINDS_AS_DATA))
        for line in kind_literals(path.read_text(), kinds)
    ]
    assert found == []


def test_the_registry_and_the_config_models_name_the_same_kinds() -> None:
    from incsync.config.destinations import DESTINATION_MODELS

    assert sorted(_destination_kinds()) == sorted(DESTINATION_MODELS)


# The design lives in the repository (docs/design.md): code and docs cite its sections by anchor, and code
# comments say why in timeless terms; history (issue numbers, dates, measurements) belongs in commits.
ROOT = PACKAGE.parent
DESIGN_DOC = ROOT / "docs" / "design.md"
DESIGN_CITATION = r"(?:docs/)?\bdesign\.md#([\w-]+)"


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens, and
    ``-1``, ``-2`` ... after a repeated one. Headings inside code blocks are not headings."""
    import re

    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading is None:
            continue
        text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))  # code, emphasis, links: their text
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def test_github_anchors_follow_githubs_rules() -> None:
    page = "# Design\n## The bounds of a transfer\n```\n# not a heading\n```\n## `max_rows_per_batch` (250,000)\n## Bounds\n## Bounds\n"
    assert github_anchors(page) == {"design", "the-bounds-of-a-transfer", "max_rows_per_batch-250000", "bounds",
                                    "bounds-1"}


def _design_citations() -> list[tuple[str, str]]:
    import re

    files = [*PACKAGE.rglob("*.py"), *(ROOT / "incsync_tests").rglob("*.py"), *(ROOT / "docs").glob("*.md"),
             ROOT / "README.md"]
    return [(str(path.relative_to(ROOT)), anchor) for path in sorted(files)
            for anchor in re.findall(DESIGN_CITATION, path.read_text())]


def test_every_citation_of_the_design_names_a_section_of_docs_design_md() -> None:
    assert DESIGN_DOC.is_file(), "docs/design.md, the project's design, is missing"
    anchors = github_anchors(DESIGN_DOC.read_text())
    cited = _design_citations()
    assert len(cited) >= 20, "the code cites the design's sections (docs/design.md#<anchor>)"
    assert sorted(f"{where}: docs/design.md#{anchor}" for where, anchor in cited if anchor not in anchors) == []


def _comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a module; a docstring's line is where it starts."""
    import io
    import tokenize

    source = path.read_text()
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(
                    body[0].value.value, str):
                found.append((body[0].lineno, body[0].value.value))
    return found


def test_code_comments_carry_no_history() -> None:
    import re

    history = re.compile(r"\bissue \d+|\b(?:January|February|March|April|May|June|July|August|September|October|"
                         r"November|December) \d{4}\b", re.I)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, text in _comments_and_docstrings(path):
            for match in history.finditer(text):
                at = line + text.count("\n", 0, match.start())
                found.append(f"{path.relative_to(ROOT)}:{at}: {match.group(0)}")
    assert found == []


def test_the_code_cites_the_design_in_the_repository_not_an_outside_file() -> None:
    import re

    found = sorted(f"{path.relative_to(ROOT)}:{n}" for path in PACKAGE.rglob("*.py")
                   for n, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"\bDESIGN\b", line))
    assert found == []


# A pure core: ``core`` knows nothing of the file model, the staging or any other package, not even for
# typing (it declares the few fields it reads as Protocols). Generic error text lives beside the errors,
# so the engine never reaches into a vendor's package to word a failure.
def every_import(module: str, path: Path) -> set[str]:
    """Every name ``module`` imports, at any depth, ``if TYPE_CHECKING:`` blocks included; ``from a import b``
    gives ``a.b`` and a relative import is made absolute."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def _within(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_every_import_sees_type_only_lazy_and_relative_imports() -> None:
    import tempfile

    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from incsync.config.model import ModelConfig\n"
              "def f():\n    import incsync.staging.batch\nfrom ..errors import ConfigError\nfrom . import bounds\n")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "example.py"
        path.write_text(source)
        found = every_import("incsync.core.example", path)
    assert found == {"typing.TYPE_CHECKING", "incsync.config.model.ModelConfig", "incsync.staging.batch",
                     "incsync.errors.ConfigError", "incsync.core.bounds"}


def test_the_core_imports_nothing_of_incsync_but_the_errors() -> None:
    found = sorted(
        f"{module} imports {name}"
        for module, path in _modules().items()
        if _within(module, "incsync.core")
        for name in every_import(module, path)
        if _within(name, "incsync") and not _within(name, "incsync.core", "incsync.errors")
    )
    assert found == []


def test_no_module_outside_the_sources_uses_a_vendors_error_text() -> None:
    import re

    vendor_errors = re.compile(r"^incsync\.sources(\.\w+)*\.errors(\.|$)")
    found = sorted(
        f"{module} imports {name}"
        for module, path in _modules().items()
        if not _within(module, "incsync.sources")
        for name in every_import(module, path)
        if vendor_errors.match(name)
    )
    assert found == []


# Tools that keep the house: ruff and mypy run in `make test` (pyproject's [tool.ruff] and [tool.mypy]); where
# code silences one of them it says why on the same line.
def unexplained_silences(source: str) -> list[str]:
    """Each ``# noqa: CODE`` without `` - why`` and each ``# type: ignore[...]`` without a comment after it."""
    import re

    found = []
    for number, line in enumerate(source.splitlines(), 1):
        noqa = re.search(r"#\s*noqa(?::\s*[A-Z0-9, ]+)?(.*)$", line)
        if noqa and not noqa.group(1).strip().startswith("- ") and "noqa" in line.split("#", 1)[-1]:
            found.append(f"{number}: {line.strip()}")
        ignore = re.search(r"#\s*type:\s*ignore(\[[^\]]*\])?(.*)$", line)
        if ignore and not ignore.group(2).strip().startswith("#"):
            found.append(f"{number}: {line.strip()}")
    return found


def test_the_silence_finder_wants_a_reason() -> None:
    source = (
        "x = 1  # noqa: BLE001\n"
        "x = 1  # noqa: BLE001 - the operator's own URL\n"
        "x = f()  # type: ignore[arg-type]\n"
        "x = f()  # type: ignore[arg-type]  # pyarrow's stubs say nothing\n"
        "x = 1  # noqa\n"
    )
    assert [line.split(":")[0] for line in unexplained_silences(source)] == ["1", "3", "5"]


def test_every_silenced_finding_says_why() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
             for line in unexplained_silences(path.read_text())]
    assert found == []


def test_make_test_runs_ruff_and_mypy_first() -> None:
    makefile = (PACKAGE.parent / "Makefile").read_text()
    assert "test: $(STAMP) lint" in makefile
    lint = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "$(BIN)/ruff check" in lint and "$(BIN)/mypy" in lint
