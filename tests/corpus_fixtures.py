"""A docstring corpus's raw material for tests: random sentences of a small vocabulary, and fake installed packages
whose docstrings are made of them."""

import random

WORDS = (
    "the model reads a file and returns its tokens while the optimizer scales each layer step by a trust "
    "ratio computed from weight and update norms so large batches train as well as small ones do"
).split()


def fake_package(root, modules=6, functions=12, packages=("pkg_a", "pkg_b", "pkg_c")):
    """Modules spread over `packages` (the first one a single-file module), each docstring a few random sentences."""
    rng = random.Random(0)
    for m in range(modules):
        lines = []
        for f in range(functions):
            sentences = [
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize() + "."
                for _ in range(rng.randint(2, 4))
            ]
            lines.append(f'def function_{f}():\n    """{" ".join(sentences)}"""\n')
        package = packages[m % len(packages)]
        path = root / (f"{package}.py" if package == packages[0] else f"{package}/module_{m}.py")
        path.parent.mkdir(parents=True, exist_ok=True)
        previous = path.read_text() + "\n\n" if path.exists() else ""
        path.write_text(previous + "\n\n".join(lines))
    return root
