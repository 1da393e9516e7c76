"""Sample texts for the exports' round-trip checks: words of the model's own vocabulary, so they reach real ids.

Example:

```python
texts = sample_texts(PairEncoder("vocab.txt", 128).vocab)  # 8 strings of 3 to 40 words
```
"""

from __future__ import annotations

import numpy as np


def sample_texts(vocab: list[str], count: int = 8, seed: int = 0) -> list[str]:
    """`count` texts of whole-word vocabulary tokens (no `##` pieces, no `[...]` specials), some of them long
    enough to be cut at short sequence lengths."""
    words = [token for token in vocab if not token.startswith(("##", "[")) and token.strip()]
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 41, count)
    return [" ".join(rng.choice(words, n)) for n in lengths]
