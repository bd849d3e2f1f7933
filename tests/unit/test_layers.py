"""The layers the architecture page states, checked on every import the product's modules make.

Every import counts, deferred ones inside functions too (they run as surely as any other); those under
`if TYPE_CHECKING:` do not (they never run). A module's imports are followed through the product, so a
pure module that imports a product module which imports pyspark breaks its rule as well.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"ticdc_delta": ROOT / "ticdc_delta", "ticdc_delta.schema_cache": ROOT / "schema_cache",
           "ticdc_delta.apply": ROOT / "apply", "ticdc_delta.jobs": ROOT / "jobs"}
# The applier's decisions, apart from the Delta I/O that carries them out.
PURE = ["ticdc_delta.apply.ordering.gate", "ticdc_delta.apply.changes.collapse", "ticdc_delta.apply.writers.evolution",
        "ticdc_delta.apply.replay", "ticdc_delta.apply.tables.points", "ticdc_delta.apply.ordering.spill",
        "ticdc_delta.apply.changes.table_changes", "ticdc_delta.apply.changes.merge_source", "ticdc_delta.apply.changes.history",
        "ticdc_delta.apply.places.folders"]


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            if package == "ticdc_delta" and path.parent != folder:
                continue
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join([package, *parts]).removesuffix(".__init__")
            found[name] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


@cache
def direct_imports(module: str) -> frozenset[str]:
    """Every module `module` imports when it runs (absolute names; product modules resolved to modules)."""
    tree = ast.parse(MODULES[module].read_text())
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                names.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names.add(child.module)
                # `from package import module` imports a module too
                names.update(f"{child.module}.{a.name}" for a in child.names if f"{child.module}.{a.name}" in MODULES)
            visit(child)

    visit(tree)
    return frozenset(names)


@cache
def reached(module: str) -> frozenset[str]:
    """Every module `module` loads, following the product's own modules (and their packages' __init__)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        for name in direct_imports(current):
            if name in seen:
                continue
            seen.add(name)
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix in MODULES and prefix not in seen | {current}:
                    seen.add(prefix)
                    todo.append(prefix)
            if name in MODULES:
                todo.append(name)
    return frozenset(seen)


def _top(name: str) -> str:
    return name.split(".")[0]


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_checker_sees_deferred_imports_and_the_product_tree():
    # Expect: the checker finds every product module and counts an import made inside a function.
    assert len(MODULES) > 80 and "ticdc_delta.jobs.cli" in MODULES and "ticdc_delta.exceptions" in MODULES
    assert "ticdc_delta.jobs.spark_engine.intake" in direct_imports("ticdc_delta.jobs.pipeline")  # deferred, in a function


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _in(m, "ticdc_delta.schema_cache")))
def test_decoding_imports_neither_spark_nor_the_kafka_consumer_nor_a_higher_layer(module):
    # Expect: schema_cache (raw messages in, typed events out) loads no pyspark or delta, no Kafka client (the
    # schema registry's client is decoding's own), nothing of apply or jobs.
    bad = [n for n in reached(module)
           if _top(n) in {"pyspark", "delta", "py4j"} or _in(n, "ticdc_delta.apply") or _in(n, "ticdc_delta.jobs")
           or (_top(n) == "confluent_kafka" and not _in(n, "confluent_kafka.schema_registry"))]
    assert bad == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _in(m, "ticdc_delta.apply")))
def test_applying_imports_no_kafka_client_and_nothing_of_jobs(module):
    # Expect: apply (typed events in, Delta commits out) loads no Kafka client and nothing of jobs.
    bad = [n for n in reached(module) if _top(n) == "confluent_kafka" or _in(n, "ticdc_delta.jobs")]
    assert bad == []


@pytest.mark.parametrize("module", PURE)
def test_the_applier_s_decisions_are_pure(module):
    # Expect: the gate, collapse, evolution rules, replay decisions and applied points load no Spark, Delta or
    # Kafka client: they are decided and tested apart from the I/O that carries them out.
    bad = [n for n in reached(module) if _top(n) in {"pyspark", "delta", "py4j", "confluent_kafka", "pyarrow"}]
    assert bad == []


def test_the_root_package_depends_on_the_event_model_only():
    # Expect: the root (version, exceptions) loads the event model and nothing else of the product.
    for module in ("ticdc_delta", "ticdc_delta.exceptions"):
        product = {n for n in reached(module) if _top(n) == "ticdc_delta"}
        assert product <= {"ticdc_delta", "ticdc_delta.schema_cache", "ticdc_delta.schema_cache.events"}


def test_the_spark_engine_is_one_package_that_only_the_pipeline_picks():
    # Expect: everything of the Spark engine is in jobs.spark_engine; outside it only the pipeline, which
    # builds the engine's intake, imports it; the applier and writer are the driver engine's, unaware of it.
    inside = [m for m in MODULES if _in(m, "ticdc_delta.jobs.spark_engine")]
    assert len(inside) >= 5
    users = sorted(m for m in MODULES if m not in inside
                   and any(_in(n, "ticdc_delta.jobs.spark_engine") for n in direct_imports(m)))
    assert users == ["ticdc_delta.jobs.pipeline"]


def _cycles() -> set[tuple[str, str]]:
    pairs = set()
    for module in MODULES:
        for other in direct_imports(module):
            if other in MODULES and other != module and module in direct_imports(other):
                pairs.add(tuple(sorted((module, other))))
    return pairs


def test_no_two_modules_import_each_other():
    assert _cycles() == set()


# apply/'s rooms, each with the rooms it may import (its own included); the top (the applier and the features on
# it: "") may import any. docs/architecture.md draws them.
APPLY_ROOMS = {
    "base": {"base"},
    "ordering": {"ordering"},
    "tables": {"tables", "base"},
    "changes": {"changes", "tables", "base"},
    "own_tables": {"own_tables", "tables", "base"},
    "places": {"places", "own_tables", "tables", "base"},
    "writers": {"writers", "places", "changes", "tables", "base"},
}


def _room(module: str) -> str:
    """The room of an apply module ("" for the top: apply/*.py)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 else ""


def _upward(module: str, imported: str) -> bool:
    """Whether `module` (of apply) importing `imported` goes against the rooms' order."""
    if not _in(imported, "ticdc_delta.apply") or imported == "ticdc_delta.apply":
        return False
    room, other = _room(module), _room(imported)
    if imported.count(".") == 2 and imported.split(".")[2] in APPLY_ROOMS:
        other = imported.split(".")[2]  # (a room's package itself)
    return room != "" and other not in APPLY_ROOMS[room]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _in(m, "ticdc_delta.apply")))
def test_apply_s_rooms_import_only_the_rooms_below_them(module):
    # Expect: every import a module of apply/ makes (deferred ones too) goes down the rooms, never up or across.
    assert _room(module) in APPLY_ROOMS or _room(module) == "", f"{module}: a room the layering does not know"
    assert [n for n in direct_imports(module) if _upward(module, n)] == []


def test_an_upward_import_is_caught():
    # Expect: the check can fail: a table marker importing a writer, an own table importing the locator, the gate
    # importing a session are each upward or across.
    assert _upward("ticdc_delta.apply.tables.markers", "ticdc_delta.apply.writers.delta_rs")
    assert _upward("ticdc_delta.apply.own_tables.checkpoint", "ticdc_delta.apply.places.locator")
    assert _upward("ticdc_delta.apply.ordering.gate", "ticdc_delta.apply.base.session")
    assert not _upward("ticdc_delta.apply.writers.delta_writer", "ticdc_delta.apply.places.locator")
    assert not _upward("ticdc_delta.apply.applier", "ticdc_delta.apply.writers.delta_writer")
