"""`python -m kbert.demo`: kbert end to end on this machine with no downloads (see kbert/demo/pipeline.py).

python -m kbert.demo --out=/tmp/kbert_demo --steps=600
python -m kbert.demo --text='notes/*.txt' --out=/tmp/my_demo
"""

from __future__ import annotations

import sys
import time

from absl import app, flags

from kbert.runtime import console

console.quiet_environment()  # before anything imports TensorFlow; its commands do the same for themselves

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "text",
    [],
    "Your own text files (comma-separated globs) instead of the docstring corpus; "
    "paragraphs separated by blank lines become documents.",
)
flags.DEFINE_string("out", None, "Output folder, absent or empty; default runs/demo-<date>-<time>.")
flags.DEFINE_integer("steps", 4500, "Optimizer steps of each pretraining run (full and MSLT).")
flags.DEFINE_integer("corpus_bytes", 2_000_000, "Size cap of the docstring corpus.")
flags.DEFINE_integer(
    "probe_seeds",
    5,
    "Random-init encoders the downstream probe scores (seeds 1..N), the floor every pretrained encoder must clear.",
    lower_bound=1,
)
flags.DEFINE_integer(
    "finetune_seeds",
    0,
    "Also fine-tune each encoder on the downstream task with kbert-finetune, seeds 1..N (0: the probe only).",
    lower_bound=0,
)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    console.filter_stderr()
    from kbert.demo.downstream import FinetuneSettings
    from kbert.demo.pipeline import DemoSettings, run_demo

    out = FLAGS.out or time.strftime("runs/demo-%Y%m%d-%H%M%S")
    try:
        run_demo(
            DemoSettings(
                out=out,
                text=FLAGS.text,
                steps=FLAGS.steps,
                corpus_bytes=FLAGS.corpus_bytes,
                probe_seeds=FLAGS.probe_seeds,
                finetune=FinetuneSettings(seeds=FLAGS.finetune_seeds),
            )
        )
    except (ValueError, FileNotFoundError, FileExistsError, RuntimeError) as e:
        sys.exit(f"kbert demo: error: {e}")


if __name__ == "__main__":
    app.run(main)
