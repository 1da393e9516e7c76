"""A kbert encoder as a keras-hub preset: `keras_hub.models.BertBackbone` with the same weights (and the
`BertMaskedLM` task where the masked-LM head computes keras-hub's), and its tokenizer.

Invariant: keras-hub's BertBackbone computes the tanh GELU, LayerNorm epsilon 1e-12 and a tanh pooler, so an encoder
with `hidden_act` gelu_approximate (or its alias gelu_new) is exported exactly: same sequence and pooled outputs up
to float32 rounding. An erf-GELU encoder (`hidden_act: gelu`, the released Google checkpoints) changes function in
the export; `export_preset` refuses it unless `allow_gelu_approximation`, and any other activation or epsilon
always, before writing anything.

Example:

```python
backbone = export_preset(encoder, "vocab.txt", "export/bert_tiny_en", lower_case=True)
difference = max_difference(encoder, backbone)  # ~1e-7 for tanh GELU; ~5e-3 on a 6-layer erf-GELU model
keras_hub.models.BertTextClassifier.from_preset("export/bert_tiny_en", num_classes=2)
```
"""

from __future__ import annotations

import numpy as np

from kbert.errors import ConfigError
from kbert.modeling import BertEncoder, BertPretrainer
from kbert.modeling.google_checkpoint import GOOGLE_LAYOUT_FIX
from kbert.modeling.keras_hub_checkpoint import (
    BACKBONE_EPSILON,
    backbone_pairs,
    computes_keras_hub_head,
    copy_pairs,
    head_pairs,
    keras_hub,
)

# keras-hub's BertBackbone: `gelu_approximate` in every TransformerEncoder, LayerNorm epsilon 1e-12.
EXACT_ACTIVATIONS = ("gelu_approximate", "gelu_new")
KERAS_HUB_EPSILON = BACKBONE_EPSILON


def check_exportable(encoder: BertEncoder, allow_gelu_approximation: bool) -> None:
    """Raises ConfigError (one line, with the fix) if keras-hub's BertBackbone cannot compute this encoder."""
    c = encoder.config
    c.require_google_layout("--format=keras_hub (keras-hub's BertBackbone)", GOOGLE_LAYOUT_FIX)
    if c.hidden_act == "gelu" and not allow_gelu_approximation:
        raise ConfigError(
            "--format=keras_hub: this model uses hidden_act=gelu, the exact erf GELU, and keras-hub's BertBackbone "
            "computes only the tanh approximation, so the export would change the model's outputs (about 5e-3 on a "
            "6-layer model). Pass --allow_gelu_approximation to export anyway (the difference measured is printed), "
            "or use --format=google, which keeps the model exact."
        )
    if c.hidden_act not in EXACT_ACTIVATIONS + ("gelu",):
        raise ConfigError(
            f"--format=keras_hub: hidden_act={c.hidden_act} has no keras-hub BertBackbone equivalent "
            "(it computes tanh GELU only); use --format=google."
        )
    if c.layer_norm_eps != KERAS_HUB_EPSILON:
        raise ConfigError(
            f"--format=keras_hub: layer_norm_eps={c.layer_norm_eps} but keras-hub's BertBackbone "
            f"fixes it at {KERAS_HUB_EPSILON}; use --format=google."
        )


def _backbone(encoder: BertEncoder):
    c = encoder.config
    return keras_hub().models.BertBackbone(
        vocabulary_size=c.vocab_size,
        num_layers=c.num_hidden_layers,
        num_heads=c.num_attention_heads,
        hidden_dim=c.hidden_size,
        intermediate_dim=c.intermediate_size,
        dropout=c.hidden_dropout_prob,
        max_sequence_length=c.max_position_embeddings,
        num_segments=c.type_vocab_size,
        dtype="float32",
    )


def to_backbone(encoder: BertEncoder):
    """A `keras_hub.models.BertBackbone` holding `encoder`'s weights (`backbone_pairs`: the mapping of keras-hub's
    own BERT converter, query/key/value kernels [H, H] reshaped to [H, heads, head_size], the attention output to
    [heads, head_size, H])."""
    backbone = _backbone(encoder)
    copy_pairs(backbone_pairs(encoder, backbone), to_keras_hub=True)
    return backbone


def to_masked_lm(pretrainer: BertPretrainer):
    """A `keras_hub.models.BertMaskedLM` (no preprocessor) holding `pretrainer`'s encoder and masked-LM head."""
    task = keras_hub().models.BertMaskedLM(to_backbone(pretrainer.encoder), preprocessor=None)
    copy_pairs(head_pairs(pretrainer, task), to_keras_hub=True)
    return task


def sample_batch(encoder: BertEncoder, batch_size: int = 4, seq_length: int = 64, seed: int = 0) -> dict:
    """Random ids, both segments and some padding: kbert's batch dict, int32."""
    rng = np.random.default_rng(seed)
    seq_length = min(seq_length, encoder.config.max_position_embeddings)
    lengths = rng.integers(seq_length // 2, seq_length + 1, batch_size)
    mask = (np.arange(seq_length)[None] < lengths[:, None]).astype(np.int32)
    segments = ((np.arange(seq_length)[None] >= lengths[:, None] // 2) & (mask > 0)).astype(np.int32)
    ids = rng.integers(0, encoder.config.vocab_size, (batch_size, seq_length)).astype(np.int32) * mask
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def max_difference(encoder: BertEncoder, backbone, batch: dict | None = None) -> float:
    """The largest |kbert - keras-hub| over the sequence and pooled outputs of a batch (real tokens only)."""
    batch = sample_batch(encoder) if batch is None else batch
    ours = encoder(batch, training=False)
    theirs = backbone(
        {"token_ids": batch["input_ids"], "segment_ids": batch["segment_ids"], "padding_mask": batch["input_mask"]},
        training=False,
    )
    return output_difference(batch, ours, theirs)


def output_difference(batch: dict, ours: dict, theirs: dict) -> float:
    """The largest |ours - theirs| over `sequence_output` (real tokens of `batch` only) and `pooled_output`."""
    real = batch["input_mask"].astype(bool)
    sequence = np.abs(np.asarray(ours["sequence_output"]) - np.asarray(theirs["sequence_output"]))[real]
    pooled = np.abs(np.asarray(ours["pooled_output"]) - np.asarray(theirs["pooled_output"]))
    return float(max(sequence.max(), pooled.max()))


def export_preset(
    encoder: BertEncoder,
    vocab_file: str,
    output_dir: str,
    lower_case: bool = True,
    allow_gelu_approximation: bool = False,
    masked_lm: BertPretrainer | None = None,
):
    """Writes the keras-hub preset (backbone config and weights, tokenizer, vocabulary and a classifier
    preprocessor packing to the model's positions) to `output_dir`, and with `masked_lm` (the pretrainer of
    `encoder`) its BertMaskedLM task too; returns the backbone.

    Raises:
      ConfigError: the encoder is not exportable (see `check_exportable`), or `masked_lm`'s head does not compute
        keras-hub's (`computes_keras_hub_head`); nothing is written then.
    """
    check_exportable(encoder, allow_gelu_approximation)
    if masked_lm is not None and not computes_keras_hub_head(masked_lm.config):
        c = masked_lm.config
        raise ConfigError(
            f"--format=keras_hub: the masked-LM head computes {c.head_act} with epsilon "
            f"{c.head_layer_norm_eps}, and keras-hub's BertMaskedLM head erf GELU with 1e-5: export "
            "the backbone alone."
        )
    hub = keras_hub()
    tokenizer = hub.models.BertTokenizer(vocabulary=vocab_file, lowercase=lower_case)
    # keras-hub's preprocessors pack to 512 by default; a model with fewer positions must say so in the preset.
    preprocessor = hub.models.BertTextClassifierPreprocessor(
        tokenizer, sequence_length=min(512, encoder.config.max_position_embeddings)
    )
    if masked_lm is not None:
        task = to_masked_lm(masked_lm)
        backbone = task.backbone
        task.save_to_preset(output_dir)  # task.json, task.weights.h5 and the backbone's files
    else:
        backbone = to_backbone(encoder)
        backbone.save_to_preset(output_dir)
    tokenizer.save_to_preset(output_dir)
    preprocessor.save_to_preset(output_dir)
    return backbone
