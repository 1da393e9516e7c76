"""kbert's ModernBERT against transformers' `ModernBertForMaskedLM` (float32, eager attention), both ways, on this
machine; transformers and torch live in a virtual environment of their own (`--transformers_python`), never in
kbert's dependencies. CI holds kbert to the float64 NumPy reference instead (tests/test_model_backends.py).

1. Import: transformers writes a random ModernBERT (its own init, and weights far from it) with each config.json form
   (transformers 5's `layer_types`/`rope_parameters`, and transformers 4's `global_rope_theta`/
   `global_attn_every_n_layers` rewritten from it); kbert reads it as `train.init_checkpoint` does, and the
   masked-LM logits at every real token of a padded batch longer than `local_attention` must agree within 1e-4.
3. Eval: `kbert-pretrain --mode=eval` with `train.init_checkpoint` set to transformers' directory scores masked
   records (MLM-only, one batch); its loss must equal transformers' loss (labels at the masked positions) within
   1e-4 relative.
2. Export: kbert writes its own random modern model (its init, and weights far from it) with
   `export_modernbert_checkpoint`; transformers' `AutoModelForMaskedLM` loads it, and the logits must agree within
   1e-4. Far from the init the residual stream grows (pre-LayerNorm leaves it unnormalised) and float32's rounding
   with it: there kbert's float32 logits differ from the float64 NumPy reference by about 1e-4 as well, so those
   differences are printed for the record and the exit status is the 1e-4 bound at the init.

    python -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors
    python tools/modernbert_against_transformers.py --transformers_python=/tmp/hf/bin/python
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from absl import app, flags

from kbert.modeling import BertConfig, BertPretrainer
from kbert.modeling.imported_checkpoint import imported_checkpoint
from kbert.modeling.modernbert_checkpoint import export_modernbert_checkpoint

FLAGS = flags.FLAGS
flags.DEFINE_string("transformers_python", None, "A Python with torch and transformers.", required=True)

LAYERS, LOCAL, EVERY, SEQ, VOCAB = 6, 16, 3, 40, 300
# transformers' half: `write DIR SCALE` makes and saves a random model (its own init; with SCALE > 0, every weight
# redrawn around 0, norms around 1, with that spread); `logits DIR BATCH OUT` computes its logits; `loss DIR
# RECORDS OUT` its masked-LM loss (the mean over every position of weight > 0) on the masked rows of an .npz
# (input_ids, input_mask; positions, ids, weights: the records' masked_lm_*), also from
# tools/continued_pretraining_modern.py.
TORCH_SIDE = """
import json, sys
import numpy as np, torch
from transformers import AutoModelForMaskedLM, ModernBertConfig, ModernBertForMaskedLM
command, directory = sys.argv[1:3]
if command == "write":
    config = ModernBertConfig(vocab_size=%(vocab)d, hidden_size=64, num_hidden_layers=%(layers)d, num_attention_heads=4,
                              intermediate_size=96, max_position_embeddings=128, local_attention=%(local)d,
                              global_attn_every_n_layers=%(every)d, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                              cls_token_id=1, sep_token_id=2)
    torch.manual_seed(0)
    model = ModernBertForMaskedLM(config)
    scale = float(sys.argv[3])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if scale:
                p.copy_((1.0 if "norm" in name else 0.0) + scale * torch.randn_like(p))
    model.save_pretrained(directory)
elif command == "loss":
    records, out = sys.argv[3:]
    model = AutoModelForMaskedLM.from_pretrained(directory, attn_implementation="eager").eval()
    data = np.load(records)
    labels = np.full(data["input_ids"].shape, -100)
    for row, (positions, ids, weights) in enumerate(zip(data["positions"], data["ids"], data["weights"])):
        labels[row, positions[weights > 0]] = ids[weights > 0]
    total, count = 0.0, 0
    for start in range(0, len(labels), 32):  # the mean over every labelled token, 32 rows a forward pass
        rows = slice(start, start + 32)
        tokens = int((labels[rows] != -100).sum())
        if not tokens:
            continue
        with torch.no_grad():
            loss = model(input_ids=torch.tensor(data["input_ids"][rows]).long(),
                         attention_mask=torch.tensor(data["input_mask"][rows]).long(),
                         labels=torch.tensor(labels[rows]).long()).loss
        total, count = total + float(loss) * tokens, count + tokens
    np.save(out, np.float64(total / count))
else:
    batch, out = sys.argv[3:]
    model = AutoModelForMaskedLM.from_pretrained(directory, attn_implementation="eager").eval()
    data = np.load(batch)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(data["input_ids"]).long(),
                       attention_mask=torch.tensor(data["input_mask"]).long()).logits
    np.save(out, logits.numpy())
"""


def torch_side(*args: str) -> None:
    script = TORCH_SIDE % {"vocab": VOCAB, "layers": LAYERS, "local": LOCAL, "every": EVERY}
    subprocess.run([FLAGS.transformers_python, "-c", script, *args], check=True, capture_output=True)


def batch() -> dict:
    """Two rows of SEQ tokens, the second padded after 30: longer than the local window."""
    rng = np.random.default_rng(0)
    ids = rng.integers(3, VOCAB, (2, SEQ)).astype(np.int32)
    mask = np.ones((2, SEQ), np.int32)
    mask[1, 30:], ids[1, 30:] = 0, 0
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


def kbert_logits(model: BertPretrainer, inputs: dict) -> np.ndarray:
    every_token = np.broadcast_to(np.arange(SEQ, dtype=np.int32), (2, SEQ))
    return np.asarray(model({**inputs, "masked_lm_positions": every_token})["mlm_logits"])


def difference(ours: np.ndarray, theirs: np.ndarray, mask: np.ndarray) -> tuple[float, float]:
    """The largest |logit difference| at a real token, and the largest |logit| there."""
    real = mask.astype(bool)
    return float(np.abs(ours[real] - theirs[real]).max()), float(np.abs(theirs[real]).max())


def v4_form(directory: str) -> None:
    """Rewrites `directory/config.json` in transformers 4's keys."""
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        values = json.load(f)
    rope = values.pop("rope_parameters")
    values.pop("layer_types")
    values.update(
        global_rope_theta=rope["full_attention"]["rope_theta"],
        local_rope_theta=rope["sliding_attention"]["rope_theta"],
        global_attn_every_n_layers=EVERY,
    )
    with open(path, "w") as f:
        json.dump(values, f)


def compare(directory: str, model: BertPretrainer, inputs: dict, work: str, what: str, scale: float) -> bool:
    """Prints the largest difference of `model`'s logits from transformers' of `directory`; whether within bounds."""
    torch_side("logits", directory, os.path.join(work, "batch.npz"), os.path.join(work, "theirs.npy"))
    gap, largest = difference(
        kbert_logits(model, inputs), np.load(os.path.join(work, "theirs.npy")), inputs["input_mask"]
    )
    print(
        f"{what}, weights {'far from' if scale else 'at'} their init: max |logit difference| {gap:.2e} "
        f"(largest |logit| {largest:.3g})",
        flush=True,
    )
    return bool(scale) or gap <= 1e-4


def eval_loss_against_transformers(directory: str, work: str) -> bool:
    """kbert-pretrain --mode=eval of `directory` (transformers' own) on masked MLM-only records, against
    transformers' loss on the same tokens; prints both."""
    import tensorflow as tf
    import yaml

    from kbert import experiment
    from kbert.data.tfrecord_writer import example_proto
    from kbert.runtime.strategy import make_strategy

    rng, rows, predictions = np.random.default_rng(2), 8, 6
    inputs = {"input_ids": rng.integers(3, VOCAB, (rows, SEQ)), "input_mask": np.ones((rows, SEQ), np.int64)}
    inputs["input_mask"][::2, 30:] = 0
    inputs["input_ids"] *= inputs["input_mask"]
    masked = {"positions": np.zeros((rows, predictions), np.int64), "ids": np.zeros((rows, predictions), np.int64)}
    masked["weights"] = np.ones((rows, predictions), np.float32)
    records = os.path.join(work, "eval.tfrecord")
    with tf.io.TFRecordWriter(records) as writer:
        for row in range(rows):
            length = int(inputs["input_mask"][row].sum())
            positions = np.sort(rng.choice(np.arange(1, length - 1), predictions, replace=False))
            masked["positions"][row], masked["ids"][row] = positions, inputs["input_ids"][row, positions]
            inputs["input_ids"][row, positions] = 4  # the records' mask token
            instance = {
                "input_ids": inputs["input_ids"][row],
                "input_mask": inputs["input_mask"][row],
                "segment_ids": np.zeros(SEQ, np.int64),
                "masked_lm_positions": masked["positions"][row],
                "masked_lm_ids": masked["ids"][row],
                "masked_lm_weights": masked["weights"][row],
            }
            writer.write(example_proto(instance))
    np.savez(os.path.join(work, "records.npz"), **inputs, **masked)
    torch_side("loss", directory, os.path.join(work, "records.npz"), os.path.join(work, "loss.npy"))
    theirs = float(np.load(os.path.join(work, "loss.npy")))
    config_file = os.path.join(work, "eval.yaml")
    with open(config_file, "w") as f:
        yaml.safe_dump(
            {
                "model": {"bert": directory},
                "data": {
                    "train_files": records,
                    "eval_files": records,
                    "seq_length": SEQ,
                    "max_predictions": predictions,
                },
                "train": {"init_checkpoint": directory},
                "eval": {"global_batch_size": rows},
            },
            f,
        )
    config = experiment.load_experiment([config_file])
    summary = experiment.run(
        config, os.path.join(work, "eval_run"), make_strategy("one_device"), "eval", lambda *a, **k: 0
    )
    ours = summary["eval"]["loss"]
    gap = abs(ours - theirs) / theirs
    print(f"--mode=eval loss {ours:.7f}, transformers' {theirs:.7f}: relative difference {gap:.2e}")
    return gap <= 1e-4


def main(argv):
    del argv
    work = tempfile.mkdtemp(prefix="modernbert-")
    inputs = batch()
    np.savez(os.path.join(work, "batch.npz"), **inputs)
    passed = True
    for scale in (0.0, 0.3):
        for form in ("transformers 5", "transformers 4"):
            directory = os.path.join(work, f"{form.replace(' ', '_')}_{scale}")
            torch_side("write", directory, str(scale))
            if form == "transformers 4":
                v4_form(directory)
            source = imported_checkpoint(directory)
            model = BertPretrainer(source.config)
            fresh = source.load(model)
            what = f"import ({form} config.json, {source.architecture}, fresh parts {fresh})"
            passed &= compare(directory, model, inputs, work, what, scale)
            if not scale and form == "transformers 5":
                passed &= eval_loss_against_transformers(directory, work)
        config = BertConfig.load("modernbert_tiny").replace(
            vocab_size=VOCAB, num_hidden_layers=LAYERS, max_position_embeddings=128, local_attention=LOCAL
        )
        model = BertPretrainer(config)
        rng = np.random.default_rng(1)
        for variable in model.weights if scale else ():
            base = 1.0 if variable.path.endswith("gamma") else 0.0
            variable.assign(base + scale * rng.standard_normal(variable.shape).astype(np.float32))
        directory = os.path.join(work, f"kbert_export_{scale}")
        export_modernbert_checkpoint(model, directory)
        passed &= compare(directory, model, inputs, work, "export (kbert -> AutoModelForMaskedLM)", scale)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    app.run(main)
