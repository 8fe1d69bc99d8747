"""The layout's rules, checked on the source: bertcore's imports point one way (common <-
data <- model <- saved <- training <- downstream, inside training from its params up to a
whole run, inside downstream from the words a task may change up to GLUE), no module is in an
import cycle, and every stage's deps in dvc.yaml are exactly the code the stage runs, so
`dvc repro` reruns a stage when, and only when, that code changes. And every output in
dvc.yaml persists, so that a stage that fails leaves the last good ones."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from bertstages.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
# Lower first: a module may import from its own package and the ones before it. Training's
# sub-packages are layers too: its params, where it computes, what each step sees, the
# checkpoints (and the identity they record), evaluation, the loop, one whole run.
TRAINING = ("training.config", "training.hardware", "training.data",
            "training.checkpoints", "training.evaluation", "training.loop", "training.run")
# Downstream's layers: the words a built-in task or probe may change, the zero-shot probes,
# the fine-tuning (downstream's own modules: the loop, its tasks, scores and recipes, pruning),
# GLUE on the fine-tuning's loop.
DOWNSTREAM = ("downstream.movable", "downstream.probes", "downstream", "downstream.glue")
ORDER = ("common", "data.corpus", "data.vocab", "data.samples", "model", "saved", "training",
         *TRAINING, *DOWNSTREAM, "compare")
# A package and those it never imports, though the order would let it: what fine-tunes runs
# none of the probes (nor do the stages that fine-tune depend on them).
APART = {"downstream": ("downstream.probes",), "downstream.glue": ("downstream.probes",)}


def module_file(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def imported_modules(name: str) -> set[str]:
    """The bertcore and stages modules `name` imports anywhere in its body (function-local
    imports too), with the packages above them (their __init__ runs as well)."""
    found = set()
    for node in ast.walk(ast.parse(module_file(name).read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for full in names:
            parts = full.split(".")
            if parts[0] not in ("bertcore", "bertstages"):
                continue
            found.update(m for i in range(1, len(parts) + 1)
                         if module_file(m := ".".join(parts[:i])))
    return found


def closure(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(imported_modules(name))
    return seen


def package_rank(name: str) -> tuple[int, str] | None:
    """The index in ORDER of the innermost package listed there that holds bertcore module
    `name`, and that package (None: bertcore itself)."""
    inner = name.removeprefix("bertcore.")
    found = [(len(package), i, package) for i, package in enumerate(ORDER)
             if inner == package or inner.startswith(package + ".")]
    return max(found)[1:] if found else None


def bertcore_modules() -> list[str]:
    return sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                  for p in (ROOT / "bertcore").rglob("*.py"))


def test_every_bertcore_module_lives_in_a_package_of_the_order():
    loose = [m for m in bertcore_modules() if m != "bertcore" and package_rank(m) is None
             and m not in ("bertcore.data",)]
    assert not loose, f"modules outside {ORDER}: {loose}"


def against_the_order(name: str, target: str) -> bool:
    """Whether module `name` may not import `target`: a later package's, or one its own
    package keeps APART from. A bare package (a docstring: probes' `bertcore.downstream`,
    which a module's import runs first) runs nothing of its layer."""
    rank, target_rank = package_rank(name), package_rank(target)
    if rank is None or target_rank is None or not holds_code(module_file(target)):
        return False
    return target_rank[0] > rank[0] or target_rank[1] in APART.get(rank[1], ())


def test_imports_point_one_way():
    upward = []
    for name in bertcore_modules():
        for target in imported_modules(name):
            # the library never reaches into the CLI
            if target.startswith("bertstages") or against_the_order(name, target):
                upward.append(f"{name} -> {target}")
    assert not upward, (f"imports against the order {' < '.join(ORDER)} (and APART, "
                        f"{APART}): {upward}")


def holds_code(path: Path) -> bool:
    """Whether a module is more than a docstring (a package's bare `__init__.py` runs nothing)."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return bool(body[1:] if body and isinstance(body[0], ast.Expr) else body)


def code_deps(runs: set[Path]) -> list[str]:
    """The packages holding the modules in `runs`, each the innermost one; a module that sits
    beside sub-packages (training/config.py), and the stage modules, file by file."""
    found = set()
    for path in runs:
        folder = path.parent
        beside_packages = any((d / "__init__.py").is_file() for d in folder.iterdir())
        found.add(path if beside_packages or folder.name == "bertstages" else folder)
    return sorted(str(p.relative_to(ROOT)) for p in found)


def stage_code(stage: str) -> set[Path]:
    """The modules `bert STAGE` runs: the command module and all it imports, and the `bert`
    group's, bare `__init__.py`s left out."""
    command_module = COMMANDS[stage].partition(":")[0]
    return {f for m in closure(command_module) | closure("bertstages.cli")
            if holds_code(f := module_file(m))}


def test_each_stage_depends_on_exactly_the_code_it_runs():
    """A stage's code deps in dvc.yaml are the code it runs, no more and no fewer (a folder
    where it runs all of it): `dvc repro` reruns it when, and only when, that code changed."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    assert set(stages) <= set(COMMANDS)
    wrong = []
    for stage, spec in stages.items():
        listed = [d for d in spec.get("deps", []) if d.startswith(("bertcore", "bertstages"))]
        runs = stage_code(stage)
        expected = code_deps(runs)
        if sorted(listed) != sorted(expected):
            wrong.append(f"{stage}: missing {sorted(set(expected) - set(listed))}, not run "
                         f"{sorted(set(listed) - set(expected))}; its code deps are:\n"
                         + "\n".join(f"      - {d}" for d in expected))
    assert not wrong, "dvc.yaml: " + "\n".join(wrong)


def test_every_output_outlives_a_failed_run_of_its_stage():
    """DVC deletes a stage's outputs before it runs the command, but not `persist: true` ones;
    every stage replaces its outputs whole once the new ones are complete, so every output
    persists and a stage stopped by a bad value leaves the last good ones (through dvc:
    tests/pipeline/test_pipeline.py)."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    deleted_first = [f"{stage}: {out if isinstance(out, str) else next(iter(out))}"
                     for stage, spec in stages.items()
                     for kind in ("outs", "metrics", "plots") for out in spec.get(kind, [])
                     if isinstance(out, str) or not next(iter(out.values())).get("persist")]
    assert not deleted_first, f"dvc.yaml: outputs without persist: true: {deleted_first}"


def module_level_imports(name: str) -> set[str]:
    """The bertcore and bertstages modules `name` imports at its top level, those under `if
    TYPE_CHECKING:` too: an import a function makes when it runs ties no module at import."""
    found = set()

    def visit(nodes) -> None:
        for node in nodes:
            if isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                candidates = [f"{node.module}.{alias.name}" for alias in node.names]
                found.update(c for c in candidates if module_file(c))
                if module_file(node.module) and not any(module_file(c) for c in candidates):
                    found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if module_file(alias.name))

    visit(ast.parse(module_file(name).read_text(encoding="utf-8")).body)
    return {m for m in found if m.startswith(("bertcore", "bertstages"))} - {name}


def test_no_import_cycle_between_modules():
    """No module is reached again from its own imports (type-only ones counted): a reader can
    take the modules in an order, and a config class never needs the code that uses it."""
    modules = [*bertcore_modules(), *sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "bertstages").rglob("*.py"))]
    graph = {name: module_level_imports(name) for name in modules}
    cycles = []
    for start in modules:
        seen, todo = set(), list(graph[start])
        while todo:
            name = todo.pop()
            if name == start:
                cycles.append(start)
                break
            if name not in seen:
                seen.add(name)
                todo.extend(graph.get(name, ()))
    assert not cycles, f"modules in an import cycle: {cycles}"


def test_architecture_names_every_module_that_imports_mlflow():
    """ARCHITECTURE.md says where MLflow is reached from: every module that imports it."""
    importers = []
    for name in bertcore_modules():
        tree = ast.parse(module_file(name).read_text(encoding="utf-8"))
        if any(isinstance(node, ast.Import | ast.ImportFrom) and any(
                (getattr(node, "module", None) or alias.name).split(".")[0] == "mlflow"
                for alias in node.names) for node in ast.walk(tree)):
            importers.append(name.removeprefix("bertcore.").replace(".", "/") + ".py")
    architecture = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert importers and not [m for m in importers if f"`{m}`" not in architecture], importers


LONGEST_FUNCTION, LONGEST_MODULE = 60, 400  # lines, docstrings and comments included


def test_every_function_and_module_reads_at_once():
    """No function of the code is over 60 lines and no module over 400: one that grows past
    them is split along a concept, not squeezed."""
    too_long = []
    for path in sorted([*(ROOT / "bertcore").rglob("*.py"), *(ROOT / "bertstages").rglob("*.py")]):
        source = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT)
        if (lines := len(source.splitlines())) > LONGEST_MODULE:
            too_long.append(f"{name}: {lines} lines")
        too_long += [f"{name}:{node.lineno} {node.name}: {length} lines"
                     for node in ast.walk(ast.parse(source))
                     if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                     and (length := node.end_lineno - node.lineno + 1) > LONGEST_FUNCTION]
    assert not too_long, "split along a concept: " + "; ".join(too_long)
