"""Growing BERT between MSLT stages: build at the stage's depth, carry the trained weights over, freeze.

A stage's model is a fresh `BertPretrainer` of the stage's depth whose backward pass is cut at the input of its
lowest trained block (`stop_gradient_below`), so the frozen blocks below run forward only: no gradient is
computed for them nor all-reduced. The cut also covers the embeddings' encoder path; trained embeddings above a
cut learn only through the MLM output tied to the word table, so only that table is left trainable then.

Example:

```python
plan = build_plan(mslt_config, bert_config, peak_learning_rate=1e-3)
model = grow(plan.bert, plan.stages[0])                     # stage 1: fresh weights
...                                                         # train it
model = grow(plan.bert, plan.stages[1], previous=model)     # stage 2: blocks 0-2 carried over, 3-5 new
[v.path for v in model.trainable_variables]                 # only blocks 3-5 and the heads
```
"""

from __future__ import annotations

import keras

from kbert.modeling import BertConfig, BertPretrainer, load_google_checkpoint
from kbert.mslt.plan import MsltStage


def freeze(model: BertPretrainer, stage: MsltStage) -> None:
    """Sets `trainable` on every sublayer of `model` as `stage` says (blocks, embeddings, pooler and heads)."""
    for i, block in enumerate(model.encoder.blocks):
        block.trainable = i in stage.trainable_layers
    embeddings = model.encoder.embeddings
    policy = stage.embeddings_policy
    embeddings.word_embeddings.trainable = policy != "frozen"
    for layer in (embeddings.position_embeddings, embeddings.token_type_embeddings, embeddings.layer_norm):
        if layer is not None:
            layer.trainable = policy == "all"
    # A pre-LayerNorm encoder's final norm feeds the heads and trains with them.
    for head in (model.encoder.final_layer_norm, model.encoder.pooler, model.mlm_head, model.nsp_head):
        if head is not None:
            head.trainable = stage.train_heads


def _copy_weights(target: keras.layers.Layer, source: keras.layers.Layer) -> None:
    """Each weight of `target` from `source`'s weight of the same path below the layer; one `source` lacks keeps
    its built value (a block copied from a first block without an attention norm: ModernBERT's)."""
    sources = {weight.path[len(source.path) :]: weight for weight in source.weights}
    targets = {weight.path[len(target.path) :]: weight for weight in target.weights}
    unknown = sorted(set(sources) - set(targets))
    if unknown:
        raise ValueError(f"{target.path} has no weights {unknown} to take from {source.path}.")
    for path, weight in targets.items():
        if path in sources:
            weight.assign(sources[path])


def build_stage_model(bert: BertConfig, stage: MsltStage, frozen_dropout: bool = False) -> BertPretrainer:
    """The model of `stage` with the weights it is built with, frozen as the stage says; the blocks below the cut
    apply dropout only with `frozen_dropout=True`."""
    model = BertPretrainer(
        bert.replace(num_hidden_layers=stage.num_layers),
        stop_gradient_below=stage.stop_gradient_below,
        dropout_below_cut=frozen_dropout,
    )
    freeze(model, stage)
    return model


def carry_over(model: BertPretrainer, previous: BertPretrainer, stage: MsltStage, new_layer_init: str = "copy") -> None:
    """Sets the weights `model` shares with `previous` (the last stage's model) from it; with `copy`, new block j
    starts as `previous` block `stage.source_layer(j)`, with `random` it keeps its built weights."""
    old_layers = previous.config.num_hidden_layers
    if old_layers != stage.previous_layers:
        raise ValueError(
            f"Stage {stage.number} grows from {stage.previous_layers} layers, but the previous model has {old_layers}."
        )
    pairs = [
        (model.encoder.embeddings, previous.encoder.embeddings),
        (model.encoder.final_layer_norm, previous.encoder.final_layer_norm),
        (model.encoder.pooler, previous.encoder.pooler),
        (model.mlm_head, previous.mlm_head),
        (model.nsp_head, previous.nsp_head),
    ]
    pairs += [(model.encoder.blocks[i], previous.encoder.blocks[i]) for i in range(old_layers)]
    if new_layer_init == "copy":
        pairs += [
            (model.encoder.blocks[j], previous.encoder.blocks[stage.source_layer(j)])
            for j in range(old_layers, stage.num_layers)
        ]
    for target, source in pairs:
        if target is not None:
            _copy_weights(target, source)


def grow(
    bert: BertConfig,
    stage: MsltStage,
    previous: BertPretrainer | None = None,
    new_layer_init: str = "copy",
    frozen_dropout: bool = False,
) -> BertPretrainer:
    """The model of `stage`: `build_stage_model`, then `carry_over` from `previous` if given.

    Weights are built from the current Keras seed; call `keras.utils.set_random_seed` first for a reproducible
    model (the runner does, per stage).
    """
    model = build_stage_model(bert, stage, frozen_dropout)
    if previous is not None:
        carry_over(model, previous, stage, new_layer_init)
    return model


def load_stage_export(bert: BertConfig, num_layers: int, path: str) -> BertPretrainer:
    """A finished stage's model, read (strictly: every weight, right shapes) from its Google-format export."""
    model = BertPretrainer(bert.replace(num_hidden_layers=num_layers))
    load_google_checkpoint(model, path)
    return model
