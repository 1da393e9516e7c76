"""Checkpoints as people get them, made from random numbers: a Hugging Face BERT directory (config.json,
model.safetensors written with `safetensors.numpy`, vocab.txt) in each of its layouts, and a keras-hub preset made
with keras-hub; plus their weights under Google's names for the float64 NumPy reference (`numpy_bert`)."""

from __future__ import annotations

import json
import os
import re

import numpy as np

# A 2-layer, hidden-32 BERT as Hugging Face's config.json says it.
HF_CONFIG = {
    "architectures": ["BertForPreTraining"],
    "model_type": "bert",
    "vocab_size": 64,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 32,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
}


def write_vocab(path: str, size: int) -> str:
    """[PAD] [UNK] [CLS] [SEP] [MASK], then words, `size` tokens in all."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(size - 5)]
    with open(path, "w") as f:
        f.write("\n".join(tokens) + "\n")
    return path


def hf_tensors(
    values: dict,
    seed: int = 0,
    architecture: str = "BertForPreTraining",
    legacy_norms: bool = False,
    scale: float = 0.3,
) -> dict[str, np.ndarray]:
    """Random float32 weights under Hugging Face's names for `architecture`; torch's layout (Linear [out, in])."""
    rng = np.random.default_rng(seed)
    h, i, v = values["hidden_size"], values["intermediate_size"], values["vocab_size"]
    t = {}

    def linear(name, out, inp):
        t[f"{name}.weight"] = rng.normal(0, scale, (out, inp))
        t[f"{name}.bias"] = rng.normal(0, scale, out)

    def norm(name):
        t[f"{name}.weight"] = 1 + rng.normal(0, 0.1, h)
        t[f"{name}.bias"] = rng.normal(0, 0.1, h)

    t["bert.embeddings.word_embeddings.weight"] = rng.normal(0, scale, (v, h))
    t["bert.embeddings.position_embeddings.weight"] = rng.normal(0, scale, (values["max_position_embeddings"], h))
    t["bert.embeddings.token_type_embeddings.weight"] = rng.normal(0, scale, (values["type_vocab_size"], h))
    norm("bert.embeddings.LayerNorm")
    for n in range(values["num_hidden_layers"]):
        p = f"bert.encoder.layer.{n}"
        for part in ("query", "key", "value"):
            linear(f"{p}.attention.self.{part}", h, h)
        linear(f"{p}.attention.output.dense", h, h)
        norm(f"{p}.attention.output.LayerNorm")
        linear(f"{p}.intermediate.dense", i, h)
        linear(f"{p}.output.dense", h, i)
        norm(f"{p}.output.LayerNorm")
    if architecture != "BertForMaskedLM":
        linear("bert.pooler.dense", h, h)
    if architecture != "BertModel":
        linear("cls.predictions.transform.dense", h, h)
        norm("cls.predictions.transform.LayerNorm")
        t["cls.predictions.bias"] = rng.normal(0, scale, v)
    if architecture == "BertForPreTraining":
        linear("cls.seq_relationship", 2, h)
    if architecture == "BertModel":
        t = {name[len("bert.") :]: value for name, value in t.items()}
    if legacy_norms:
        t = {
            re.sub(r"LayerNorm\.weight$", "LayerNorm.gamma", re.sub(r"LayerNorm\.bias$", "LayerNorm.beta", n)): x
            for n, x in t.items()
        }
    return {name: value.astype(np.float32) for name, value in t.items()}


def write_hf(
    directory, values: dict = None, tensors: dict = None, vocab: bool = True, tokenizer: dict = None, **weights
) -> str:
    """A Hugging Face BERT directory: config.json, model.safetensors (`tensors`, or `hf_tensors(values,
    **weights)`), a vocab.txt of vocab_size tokens and, given `tokenizer`, that tokenizer_config.json."""
    from safetensors.numpy import save_file

    values = dict(HF_CONFIG, **(values or {}))
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(values, f)
    save_file(
        tensors if tensors is not None else hf_tensors(values, **weights),
        os.path.join(directory, "model.safetensors"),
        metadata={"format": "pt"},
    )
    if vocab:
        write_vocab(os.path.join(directory, "vocab.txt"), values["vocab_size"])
    if tokenizer is not None:
        with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
            json.dump(tokenizer, f)
    return str(directory)


def google_weights_of_hf(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Hugging Face weights under Google's names and layout (kernels [in, out]), float64: `numpy_bert`'s input."""
    out = {}
    for name, value in tensors.items():
        value = np.asarray(value, np.float64)
        name = name if name.startswith(("bert.", "cls.")) else "bert." + name
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if name == "cls.predictions.bias":
            out["cls/predictions/output_bias"] = value
        elif name.startswith("cls.seq_relationship."):
            out["cls/seq_relationship/" + ("output_weights" if name.endswith("weight") else "output_bias")] = value
        else:
            google = re.sub(r"layer\.(\d+)", r"layer_\1", name).replace(".", "/")
            if google.endswith("_embeddings/weight"):
                out[google[: -len("/weight")]] = value
            elif "/LayerNorm/" in google:
                out[google.replace("/weight", "/gamma").replace("/bias", "/beta")] = value
            elif google.endswith("/weight"):
                out[google[: -len("weight")] + "kernel"] = value.T
            else:
                out[google] = value
    return out


def write_keras_hub_preset(directory, values: dict = None, masked_lm: bool = True, seed: int = 0, scale: float = 0.3):
    """A keras-hub BERT preset made by keras-hub (a BertMaskedLM task or a BertBackbone alone) with random
    weights of `scale`, and its tokenizer; returns the keras-hub model."""
    import keras_hub

    values = dict(HF_CONFIG, **(values or {}))
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=values["vocab_size"],
        num_layers=values["num_hidden_layers"],
        num_heads=values["num_attention_heads"],
        hidden_dim=values["hidden_size"],
        intermediate_dim=values["intermediate_size"],
        max_sequence_length=values["max_position_embeddings"],
        num_segments=values["type_vocab_size"],
        dtype="float32",
    )
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None) if masked_lm else backbone
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        shape = tuple(weight.shape)
        base = 1.0 if "gamma" in weight.path else 0.0
        weight.assign((base + rng.normal(0, 0.1 if base else scale, shape)).astype(np.float32))
    model.save_to_preset(str(directory))
    vocab = write_vocab(os.path.join(str(directory), "vocab_source.txt"), values["vocab_size"])
    keras_hub.models.BertTokenizer(vocabulary=vocab).save_to_preset(str(directory))
    os.remove(vocab)
    return model
