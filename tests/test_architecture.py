"""The package layering of docs/architecture.md, checked on the source: lower layers never import higher ones."""

import ast
import pathlib

import pytest

KBERT = pathlib.Path(__file__).resolve().parents[1] / "kbert"
# Each package and what it may import from kbert, besides itself and the leaf modules below.
ALLOWED = {
    "config": set(),
    "optimizers": set(),
    "modeling": set(),
    "data": set(),
    "runtime": {"config", "optimizers", "modeling"},
    "training": {"config", "optimizers", "modeling", "data", "runtime"},
    "tasks": {"config", "optimizers", "modeling", "data", "runtime", "training"},
    "mslt": {"config", "optimizers", "modeling", "data", "runtime", "training", "tasks"},
    "finetuning": {"config", "optimizers", "modeling", "data", "runtime"},
    "fit": {"optimizers", "modeling", "data"},
}
LEAVES = {"errors", "choices", "checkpoint_index"}


def _kbert_imports(path: pathlib.Path) -> set[str]:
    """The kbert subpackages or top-level modules a file imports (`kbert.training.loop` -> `training`)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        names.update(m.split(".")[1] for m in modules if m.startswith("kbert.") and m.count(".") >= 1)
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_the_layers_below_them(package):
    files = sorted((KBERT / package).rglob("*.py"))
    assert files, f"kbert/{package} has no modules"
    for path in files:
        higher = _kbert_imports(path) - ALLOWED[package] - LEAVES - {package}
        assert not higher, f"{path.relative_to(KBERT.parent)} imports kbert.{sorted(higher)}, a layer above it"


def test_leaf_modules_import_nothing_from_kbert():
    for name in LEAVES:
        assert not _kbert_imports(KBERT / f"{name}.py"), f"kbert/{name}.py must stay a leaf"


def _edits_sys_path(path: pathlib.Path) -> bool:
    """Whether a file calls a method of `sys.path` (insert, append, ...)."""
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "path"
        and isinstance(node.func.value.value, ast.Name)
        and node.func.value.value.id == "sys"
        for node in ast.walk(ast.parse(path.read_text()))
    )


def test_tools_and_tests_import_kbert_as_a_package_and_no_tool_imports_the_demo():
    # What tools/ and tests/ share is library code in kbert; a script reaches its own folder's modules anyway.
    root = KBERT.parent
    files = sorted(p for folder in ("tools", "tests") for p in (root / folder).rglob("*.py"))
    assert [p for p in files if _edits_sys_path(p)] == []
    assert [p for p in files if p.parent.name == "tools" and "demo" in _kbert_imports(p)] == []


def _kbert_modules(path: pathlib.Path) -> set[str]:
    """The kbert modules a file imports from (`from kbert.training.loop import x` -> `kbert.training.loop`)."""
    return {
        node.module
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("kbert.")
    } | {
        alias.name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("kbert.")
    }


def test_the_engine_names_no_model_and_no_objective():
    """kbert/training runs a task's model (kbert.training.task); BERT and its losses are a task's (kbert.tasks)."""
    for path in sorted((KBERT / "training").rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        where = path.relative_to(KBERT.parent)
        assert not {n for n in names if n.endswith(".BertPretrainer")}, f"{where} imports BertPretrainer"
        assert not {n for n in names if n.startswith("kbert.modeling.losses")}, f"{where} imports the BERT losses"
        assert not {n for n in names if n.split(".")[0] == "orbit"}, f"{where} imports orbit"


def test_mslt_holds_the_plan_and_growth_and_no_loop():
    """kbert/mslt makes stages for the engine; it never runs them, so it imports no loop, trainer or engine."""
    running = {
        "kbert.training",
        "kbert.training.loop",
        "kbert.training.trainer",
        "kbert.training.engine",
        "kbert.training.build_ahead",
    }
    for path in sorted((KBERT / "mslt").rglob("*.py")):
        assert not _kbert_modules(path) & running, f"{path.relative_to(KBERT.parent)} imports the loop"


def test_the_replica_step_is_at_most_six_calls_below_kbert_pretrain():
    """main -> experiment.run -> PretrainingRun.train -> loop.train -> PretrainingTrainer.train -> _loop_fn ->
    strategy.run(_apply_step): the path docs/architecture.md lists, read off the source (each function on it
    calls the next by name), for a plain, a two-phase and an MSLT run alike."""
    path = [
        ("cli/pretrain.py", "main", "run"),
        ("experiment.py", "run", "train"),
        ("training/engine.py", "train", "train"),
        ("training/loop.py", "train", "train"),
        ("training/trainer.py", "train", "_loop"),
        ("training/trainer.py", "_loop_fn", "run"),
    ]
    for file, function, callee in path:
        tree = ast.parse((KBERT / file).read_text())
        body = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == function)
        called = {
            getattr(call.func, "attr", getattr(call.func, "id", None))
            for call in ast.walk(body)
            if isinstance(call, ast.Call)
        }
        assert callee in called, f"kbert/{file}: {function} no longer calls {callee}"
    assert len(path) <= 6  # the last hop, strategy.run(self._apply_step, ...), runs the replica step
