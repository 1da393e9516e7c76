"""`kbert-export --format=tf_hub`: an encoder and its preprocessing as the two SavedModels of TF Hub's BERTs.

Invariant: `output_dir/preprocess` and `output_dir/encoder` load with `tf.saved_model.load` (TensorFlow and
tensorflow-text, no kbert) and compute kbert's tokenization and encoder, GELU included (erf or tanh, whichever the
model has); the export loads them back, measures the largest output difference on sample texts, returns it and
writes it into `output_dir/README.md` with the GELU and the interface followed.

Example:

```python
pretrainer, has_mlm = checkpoint_pretrainer("runs/bert_tiny", "", "vocab.txt")
export_tf_hub(pretrainer, has_mlm, "vocab.txt", "export/bert_tiny_hub")  # ~1e-7
```
"""

from __future__ import annotations

import os

import tensorflow as tf

from kbert.errors import ConfigError
from kbert.finetuning.encoding import PairEncoder
from kbert.finetuning.hub_export import output_difference
from kbert.finetuning.serving.hub_encoder import HubEncoder
from kbert.finetuning.serving.hub_preprocess import HubPreprocessor
from kbert.finetuning.serving.samples import sample_texts
from kbert.finetuning.vocabulary import checkpoint_tokenizer
from kbert.modeling import BertEncoder, BertPretrainer

PREPROCESS, ENCODER, README = "preprocess", "encoder", "README.md"
# The interface matched: Model Garden's official/nlp/tools/export_tfhub_lib.py in this release.
MODEL_GARDEN = "tf-models-official 2.20.0"
DEFAULT_SEQ_LENGTH = 128
GELU = {
    "gelu": "the exact erf GELU, x·Φ(x), as google-research/bert's released checkpoints and Hugging Face",
    "gelu_approximate": "the tanh approximation of GELU, as Model Garden and keras-hub",
}
GELU["gelu_new"] = GELU["gelu_approximate"]


def _seq_length(requested: int | None, max_positions: int) -> int:
    if requested is None:
        return min(DEFAULT_SEQ_LENGTH, max_positions)
    if not 3 <= requested <= max_positions:
        raise ConfigError(
            f"--seq_length={requested}: the preprocessor's default length must be in [3, "
            f"{max_positions}], the model's max_position_embeddings; pick one in that range."
        )
    return requested


def round_trip_difference(encoder: BertEncoder, text_encoder: PairEncoder, output_dir: str) -> float:
    """The largest |kbert - SavedModel| over `sequence_output` (real tokens) and `pooled_output` of sample texts
    through the exported preprocessor and encoder, loaded back."""
    texts = tf.constant(sample_texts(text_encoder.vocab))
    batch = text_encoder.encode(texts)
    ours = encoder(batch, training=False)
    preprocess = tf.saved_model.load(os.path.join(output_dir, PREPROCESS))
    theirs = tf.saved_model.load(os.path.join(output_dir, ENCODER))(preprocess(texts))
    return output_difference({name: value.numpy() for name, value in batch.items()}, ours, theirs)


def _readme(encoder: BertEncoder, text_encoder: PairEncoder, has_mlm: bool, lower_case: bool, difference: float) -> str:
    c = encoder.config
    mlm = (
        "`encoder.mlm` also gives `mlm_logits` at `masked_lm_positions`"
        if has_mlm
        else "no `encoder.mlm`: the checkpoint holds no masked-LM head"
    )
    casing = "lower-cased and accent-stripped" if lower_case else "cased"
    return "\n".join(
        [
            "# BERT in TF Hub's format, exported by kbert",
            "",
            f"`preprocess/` and `encoder/` follow the interface of Model Garden's `export_tfhub` ({MODEL_GARDEN}), so "
            "code that loads a TF Hub BERT with `hub.KerasLayer` or `tf.saved_model.load` works with them unchanged.",
            "",
            f"- Encoder: {c.num_hidden_layers} layers, width {c.hidden_size}, {c.num_attention_heads} heads, a "
            f"vocabulary of {c.vocab_size}; {mlm}.",
            f"- Activation: `hidden_act={c.hidden_act}`, {GELU.get(c.hidden_act, 'not a GELU')}. The SavedModel "
            "computes what the kbert model computes.",
            f"- Preprocessing: WordPiece, {casing}, packed to {text_encoder.seq_length} tokens by default "
            "(`bert_pack_inputs(segments, seq_length=N)` for another length); a pair loses pieces from its longer "
            "segment first.",
            f"- Round trip: the largest |kbert - SavedModel| output difference on sample texts was {difference:.3g}.",
            "",
            "```python",
            "import tensorflow as tf",
            "import tensorflow_text  # noqa: F401  (registers the preprocessor's ops)",
            "",
            'preprocess = tf.saved_model.load("preprocess")',
            'encoder = tf.saved_model.load("encoder")',
            'outputs = encoder(preprocess(tf.constant(["hello world"])))',
            'outputs["pooled_output"], outputs["sequence_output"], outputs["encoder_outputs"]',
            "```",
            "",
        ]
    )


def check_tokenization(checkpoint: str, vocab_file: str) -> None:
    """Raises ConfigError (one line, with the fix) for a checkpoint that tokenizes with a tokenizer.json (a Hugging
    Face ModernBERT's) where no `vocab_file` is given: the preprocess SavedModel takes strings and tokenizes inside
    the TensorFlow graph, and the `tokenizers` library runs outside it."""
    tokenizer = None if vocab_file else checkpoint_tokenizer(checkpoint)
    if tokenizer:
        raise ConfigError(
            f"--format=tf_hub: its preprocess SavedModel takes strings and tokenizes inside the TensorFlow graph, and "
            f"{checkpoint} tokenizes with a tokenizer.json ({tokenizer}) outside it; fine-tune it with kbert-finetune "
            "and label files with kbert-predict --model=RUN_DIR, or export the encoder with --format=hf."
        )


def export_tf_hub(
    pretrainer: BertPretrainer,
    has_mlm: bool,
    vocab_file: str,
    output_dir: str,
    lower_case: bool = True,
    seq_length: int | None = None,
) -> float:
    """Writes `output_dir/preprocess`, `output_dir/encoder` (with `mlm` if `has_mlm`) and `README.md`; returns
    the round trip's largest difference. `seq_length` None: 128, or the model's max positions if fewer.

    Raises:
      ConfigError: `seq_length` outside [3, max_position_embeddings], or a model without a pooler (a masked-LM-only
        model such as ModernBERT's: the interface's `pooled_output` has nothing to hold).
    """
    encoder = pretrainer.encoder
    if encoder.pooler is None:
        raise ConfigError(
            "--format=tf_hub: Model Garden's TF Hub interface carries a pooled_output, and this model has no pooler "
            "(sentence_head: false, as ModernBERT's): export it with --format=hf."
        )
    text_encoder = PairEncoder(vocab_file, _seq_length(seq_length, encoder.config.max_position_embeddings), lower_case)
    preprocessor = HubPreprocessor(text_encoder)
    tf.saved_model.save(
        preprocessor, os.path.join(output_dir, PREPROCESS), signatures={"serving_default": preprocessor.__call__}
    )
    hub_encoder = HubEncoder(encoder, pretrainer.mlm_head if has_mlm else None, vocab_file, lower_case)
    tf.saved_model.save(
        hub_encoder, os.path.join(output_dir, ENCODER), signatures={"serving_default": hub_encoder.serving_default}
    )
    difference = round_trip_difference(encoder, text_encoder, output_dir)
    with tf.io.gfile.GFile(os.path.join(output_dir, README), "w") as f:
        f.write(_readme(encoder, text_encoder, has_mlm, lower_case, difference))
    return difference
