"""Each weight's names in the checkpoint formats kbert reads and writes, declared once by the part that holds it.

A part (`BertEmbeddings`, `TransformerBlock`, `SelfAttention`, the encoder's pooler and final norm, the heads)
lists its weights with their names in four systems: google-research/bert's TF1 checkpoints (from which Hugging
Face BERT's names follow by rule, `kbert.modeling.hf_checkpoint`), keras-hub's BERT (an attribute path into its
`BertBackbone`, or its `BertMaskedLM` task under `task/`), Model Garden's BERT (the peer benchmarks load into) and
Hugging Face's ModernBERT (`ModernBertModel`'s state-dict names; a slice of rows where one tensor holds several
weights: query, key and value in `Wqkv`). `google_variable_map`, `hf_variable_map`, keras-hub's weight pairs,
`kbert.modeling.modernbert_checkpoint` and `tools/model_garden_peer.py` read these declarations; none lists a name
of its own.

Example:

```python
names = model.weight_names()                # BertPretrainer or BertEncoder
names[0].google, names[0].keras_hub         # ('bert/embeddings/word_embeddings', 'token_embedding/embeddings')
```
"""

from __future__ import annotations

import dataclasses

import keras


@dataclasses.dataclass(frozen=True)
class WeightName:
    """One weight and its names; an empty name: that system has no such weight (keras-hub's BERT has no
    next-sentence head). `transposed`: Google stores the transpose of kbert's variable. `modernbert_rows`: the
    (start, stop) rows of the ModernBERT tensor that hold this weight (torch's layout, [out, in])."""

    variable: keras.Variable
    google: str
    keras_hub: str = ""
    model_garden: str = ""
    transposed: bool = False
    modernbert: str = ""
    modernbert_rows: tuple[int, int] | None = None


# A Keras variable's name -> torch's (a Dense kernel is torch's `weight`, stored [out, in]).
_TORCH_NAMES = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias", "embeddings": "weight"}


def part_names(
    layer: keras.layers.Layer,
    google: str,
    keras_hub: str = "",
    model_garden: str = "",
    modernbert: str = "",
    modernbert_rows: tuple[int, int] | None = None,
) -> list[WeightName]:
    """The names of a Dense or LayerNormalization `layer`'s weights (kernel, bias; gamma, beta): each system's
    prefix for the layer, then the variable's own name, which is the same in the TensorFlow and Keras systems and
    torch's (`weight`, `bias`) in ModernBERT's."""
    return [
        WeightName(
            variable,
            f"{google}/{variable.name}",
            f"{keras_hub}/{variable.name}" if keras_hub else "",
            f"{model_garden}/{variable.name}" if model_garden else "",
            modernbert=f"{modernbert}.{_TORCH_NAMES[variable.name]}" if modernbert else "",
            modernbert_rows=modernbert_rows,
        )
        for variable in layer.weights
    ]
