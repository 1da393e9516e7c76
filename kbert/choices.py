"""The names that flags and config keys accept, in one place that imports nothing (so `--help` stays fast)."""

STRATEGIES = ("auto", "tpu", "multi_worker_mirrored", "mirrored", "one_device")
MODES = ("train", "eval", "train_and_eval")
PRECISION_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
ALL_REDUCE = ("auto", "nccl", "ring")
DEVICES = ("auto", "cpu")  # --device: cpu trains on the CPU even beside a GPU or TPU
# kbert-export --hf_architecture: the Hugging Face BERT layouts kbert writes (and reads).
HF_ARCHITECTURES = ("BertForPreTraining", "BertForMaskedLM", "BertModel")
# model.classifier_pooling (and ModernBERT's config.json's): what a classifier without a pooler classifies from.
CLASSIFIER_POOLINGS = ("cls", "mean")
# train.jit_compile -> what XLA compiles; "step" makes the whole replica step one cluster, optimizer update fused in.
WHOLE_STEP = "step"
JIT_COMPILE = {
    False: "nothing",
    True: "the forward and backward pass",
    WHOLE_STEP: "the whole replica step, optimizer update included",
}


def is_jit_compile_choice(value) -> bool:
    """Whether `value` is one of `JIT_COMPILE` (by identity for the booleans: 1 is not True here)."""
    return isinstance(value, bool) or value == WHOLE_STEP
