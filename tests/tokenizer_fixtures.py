"""Hugging Face tokenizer.json files for tests, trained here on generated text (nothing is downloaded): byte-level
BPE with ModernBERT's special tokens or with RoBERTa's, each with its post-processor (which data creation must not
apply).

    path = write_tokenizer(tmp_path / "modernbert", MODERNBERT)  # tmp_path/modernbert/tokenizer.json
    lines = generated_lines(300)
"""

import pathlib
import random

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

MODERNBERT = ("[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]")
ROBERTA = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")  # RoBERTa's order: <s> 0, <pad> 1, </s> 2, <unk> 3
_SYLLABLES = ("ka", "to", "mi", "ren", "sol", "ab", "qu", "ix", "ver", "ne", "lo", "dra")


def generated_words(count: int = 150, seed: int = 0) -> list[str]:
    """Made-up words of one to four syllables, so BPE splits the rarer ones into several pieces."""
    rng = random.Random(seed)
    return ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(count)]


def generated_lines(count: int, seed: int = 0, punctuation: bool = True) -> list[str]:
    """Sentences of the generated words, ending with a full stop, a comma or an exclamation mark if `punctuation`."""
    rng = random.Random(seed)
    words = generated_words()
    ends = (".", "!", ",") if punctuation else ("",)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + rng.choice(ends) for _ in range(count)]


def write_tokenizer(
    directory: pathlib.Path,
    special_tokens=MODERNBERT,
    vocab_size: int = 400,
    add_prefix_space: bool = False,
    extra_special: tuple[str, ...] = (),
) -> pathlib.Path:
    """A byte-level BPE tokenizer.json trained on `generated_lines`, in `directory`; returns its path."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens) + list(extra_special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(generated_lines(300), trainer)
    cls = next(t for t in special_tokens if t in ("[CLS]", "<s>"))
    sep = next(t for t in special_tokens if t in ("[SEP]", "</s>"))
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B {sep}",
        special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))],
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    tokenizer.save(str(path))
    return path
