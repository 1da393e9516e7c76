"""A float64 NumPy BERT over Google-named weights: the reference the Keras model is checked against."""

import math

import numpy as np

from kbert.modeling import google_variable_map


def google_weights(model) -> dict:
    """Google name -> float64 array in Google's layout."""
    return {
        name: (np.asarray(v.numpy(), np.float64).T if transposed else np.asarray(v.numpy(), np.float64))
        for name, (v, transposed) in google_variable_map(model).items()
    }


def _layer_norm(x, w, prefix, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[prefix + "/gamma"] + w.get(prefix + "/beta", 0.0)


def _dense(x, w, prefix):
    return x @ w[prefix + "/kernel"] + w.get(prefix + "/bias", 0.0)


def _feed_forward(x, w, p, config):
    """`plain`: output(act(intermediate(x))); `gated`: output(act(a) * g), [a, g] = intermediate(x) (a GLU)."""
    inner = _dense(x, w, f"{p}/intermediate/dense")
    if config.feed_forward == "gated":
        half = inner.shape[-1] // 2
        inner = _gelu(inner[..., :half], config.hidden_act) * inner[..., half:]
    else:
        inner = _gelu(inner, config.hidden_act)
    return _dense(inner, w, f"{p}/output/dense")


def _gelu(x, form="gelu"):
    """The exact erf GELU (`gelu`), or the tanh approximation (`gelu_approximate`, `gelu_new`)."""
    if form in ("gelu_approximate", "gelu_new"):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if form in ("silu", "swish"):  # SwiGLU's
        return x / (1.0 + np.exp(-x))
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _rotate(t, theta):
    """RoPE of `t` [B, heads, S, d] at positions 0..S-1, rotate-half convention: t cos + [-t2, t1] sin."""
    size, seq = t.shape[-1], t.shape[-2]
    angles = np.arange(seq)[:, None] / theta ** (np.arange(0, size, 2) / size)[None]  # [S, d/2]
    angles = np.concatenate([angles, angles], -1)
    return t * np.cos(angles) + np.concatenate([-t[..., size // 2 :], t[..., : size // 2]], -1) * np.sin(angles)


def _attention(h, w, p, config, bias, index):
    """Block `p` (number `index`)'s attention sublayer of `h` [B, S, H]: heads (turned by rotary positions), softmax
    with the additive mask `bias` (and a local layer's band), projection."""
    heads, size, seq = config.num_attention_heads, config.head_size, h.shape[1]
    split = lambda t: t.reshape(t.shape[0], t.shape[1], heads, size).transpose(0, 2, 1, 3)
    q, k, v = (split(_dense(h, w, f"{p}/attention/self/{n}")) for n in ("query", "key", "value"))
    is_global = not config.local_attention or index % config.global_attn_every_n_layers == 0
    if config.position_embedding == "rotary":
        theta = config.rope_theta if is_global else config.local_rope_theta
        q, k = _rotate(q, theta), _rotate(k, theta)
    if not is_global:
        far = np.abs(np.arange(seq)[:, None] - np.arange(seq)[None]) > config.local_attention // 2
        bias = bias + far * -10000.0
    probs = _softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + bias)
    return _dense((probs @ v).transpose(0, 2, 1, 3).reshape(h.shape), w, f"{p}/attention/output/dense")


def encode(w, config, input_ids, input_mask, segment_ids):
    """Returns (per-layer outputs, sequence output, pooled output); the pooled output is None without pooler
    weights."""
    seq = input_ids.shape[1]
    x = w["bert/embeddings/word_embeddings"][input_ids]
    if "bert/embeddings/token_type_embeddings" in w:
        x = x + w["bert/embeddings/token_type_embeddings"][segment_ids]
    if "bert/embeddings/position_embeddings" in w:
        x = x + w["bert/embeddings/position_embeddings"][:seq][None]
    eps = config.layer_norm_eps
    if config.embedding_layer_norm:
        x = _layer_norm(x, w, "bert/embeddings/LayerNorm", eps)
    bias = (1.0 - input_mask[:, None, None, :].astype(np.float64)) * -10000.0
    outputs = []
    for i in range(config.num_hidden_layers):
        p = f"bert/encoder/layer_{i}"

        def attend(h, p=p, i=i):
            return _attention(h, w, p, config, bias, i)

        if config.norm_placement == "post":
            x = _layer_norm(x + attend(x), w, f"{p}/attention/output/LayerNorm", eps)
            x = _layer_norm(x + _feed_forward(x, w, p, config), w, f"{p}/output/LayerNorm", eps)
        else:  # pre: x + f(LN(x)); block 0 may have no attention norm
            has_norm = f"{p}/attention/output/LayerNorm/gamma" in w
            x = x + attend(_layer_norm(x, w, f"{p}/attention/output/LayerNorm", eps) if has_norm else x)
            x = x + _feed_forward(_layer_norm(x, w, f"{p}/output/LayerNorm", eps), w, p, config)
        outputs.append(x)
    if config.norm_placement == "pre":  # the sequence output: the last block's, normalised
        x = _layer_norm(x, w, "bert/encoder/LayerNorm", eps)
    pooled = np.tanh(_dense(x[:, 0], w, "bert/pooler/dense")) if "bert/pooler/dense/kernel" in w else None
    return outputs, x, pooled


def mlm_logits(w, config, batch):
    """The masked-LM logits [B, P, V] of `batch`."""
    return pretrain_logits(w, config, batch, with_nsp=False)[0]


def pretrain_logits(w, config, batch, with_nsp=True):
    _, seq_out, pooled = encode(w, config, batch["input_ids"], batch["input_mask"], batch["segment_ids"])
    gathered = np.take_along_axis(seq_out, batch["masked_lm_positions"][:, :, None].astype(np.int64), axis=1)
    h = _gelu(_dense(gathered, w, "cls/predictions/transform/dense"), config.head_act)
    h = _layer_norm(h, w, "cls/predictions/transform/LayerNorm", config.head_layer_norm_eps)
    mlm = h @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
    if not with_nsp or pooled is None:
        return mlm, None
    nsp = pooled @ w["cls/seq_relationship/output_weights"].T + w["cls/seq_relationship/output_bias"]
    return mlm, nsp


def random_batch(rng, config, batch_size=3, seq_length=16, max_predictions=5):
    """A batch with real padding: each row has its own length and its own number of predictions."""
    ids = rng.integers(5, config.vocab_size, (batch_size, seq_length)).astype(np.int32)
    mask = np.zeros((batch_size, seq_length), np.int32)
    positions = np.zeros((batch_size, max_predictions), np.int32)
    weights = np.zeros((batch_size, max_predictions), np.float32)
    for b in range(batch_size):
        length = int(rng.integers(seq_length // 2, seq_length + 1))
        mask[b, :length] = 1
        ids[b, length:] = 0
        n = int(rng.integers(1, max_predictions + 1))
        positions[b, :n] = np.sort(rng.choice(np.arange(1, length), n, replace=False))
        weights[b, :n] = 1.0
    segments = np.zeros_like(ids)
    segments[:, seq_length // 2 :] = 1
    segments *= mask
    return {
        "input_ids": ids,
        "input_mask": mask,
        "segment_ids": segments,
        "masked_lm_positions": positions,
        "masked_lm_ids": (rng.integers(5, config.vocab_size, (batch_size, max_predictions)) * weights).astype(np.int32),
        "masked_lm_weights": weights,
        "next_sentence_labels": rng.integers(0, 2, (batch_size, 1)).astype(np.int32),
    }
