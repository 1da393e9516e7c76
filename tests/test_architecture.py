"""The package layering of docs/architecture.md, checked on the source: lower layers never import higher ones."""

import ast
import pathlib
import re

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
    "fit_pretraining": {"optimizers", "modeling", "data"},
    "bench": {"config", "optimizers", "modeling", "data", "runtime", "training"},
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


def test_the_old_name_kbert_fit_warns_and_gives_kbert_fit_pretraining():
    """kbert/fit.py, the one alias in kbert: code written before the rename still imports, and is told the new name."""
    import importlib
    import sys

    import kbert.fit_pretraining

    sys.modules.pop("kbert.fit", None)
    with pytest.warns(DeprecationWarning, match=r"kbert\.fit is now kbert\.fit_pretraining"):
        old = importlib.import_module("kbert.fit")
    assert old.__all__ == kbert.fit_pretraining.__all__
    assert all(getattr(old, name) is getattr(kbert.fit_pretraining, name) for name in old.__all__)


def test_kbert_data_names_its_lazy_exports_statically():
    """kbert.data imports its names on first use (`__getattr__`); its `__all__` and TYPE_CHECKING imports, what the
    API reference reads without importing it, name the same ones from the same modules."""
    import kbert.data

    tree = ast.parse((KBERT / "data" / "__init__.py").read_text())
    static = {
        alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module.startswith("kbert.")
        for alias in node.names
    }
    assert static == kbert.data._EXPORTS
    assert sorted(kbert.data.__all__) == sorted(kbert.data._EXPORTS)


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


@pytest.mark.slow
def test_the_call_chain_to_the_replica_step_is_the_one_docs_architecture_lists(tmp_path, monkeypatch):
    """The kbert functions on the stack when the replica step runs (a tiny plain run traced in this process),
    from `kbert-pretrain`'s main down: docs/architecture.md's numbered chain names exactly these, in order."""
    import inspect

    from training_fixtures import run_here, write_config, write_shards

    from kbert.training.trainer import PretrainingTrainer

    stack: list[str] = []
    replica_step = PretrainingTrainer._apply

    def spy(self, batch):
        if not stack:
            frames = reversed(inspect.stack()[1:])
            stack.extend(f.function for f in frames if f.filename.startswith(str(KBERT)))
        return replica_step(self, batch)

    monkeypatch.setattr(PretrainingTrainer, "_apply", spy)
    data = write_shards(str(tmp_path / "data"), "train", shards=1, records_per_shard=16)
    run_here(write_config(str(tmp_path / "c.yaml"), data, train={"total_steps": 2}), tmp_path / "run")
    pretrain_main = ast.parse((KBERT / "cli/pretrain.py").read_text())
    main = next(n for n in ast.walk(pretrain_main) if isinstance(n, ast.FunctionDef) and n.name == "main")
    assert any(getattr(c.func, "attr", None) == "run" for c in ast.walk(main) if isinstance(c, ast.Call))
    chain = ["main", *stack, "_apply"]
    docs = (KBERT.parent / "docs" / "architecture.md").read_text()
    listed = re.findall(r"^(\d+) (\S+)", docs.split("## From the command line to the replica step")[1], re.M)
    assert [int(number) for number, _ in listed] == list(range(1, len(chain) + 1)), listed
    assert [name.split("(")[0].split(".")[-1] for _, name in listed] == chain, (listed, chain)
