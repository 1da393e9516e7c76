"""Shortest-pack-first histogram packing (SPFHP, Krell et al. 2021): which sequence lengths share a row.

The plan is made from the histogram of lengths alone, never from the sequences, so its cost depends on the row
length S and the number of distinct packs, not on how many sequences there are. Lengths are taken longest first;
each length goes, as many at a time as possible, into the open pack with the most room left that it fits (the
"shortest" pack); a length that fits none starts new packs, each taking as many of that length as fit, which is
what placing the sequences one at a time would do (Graphcore's histogram code gives each of them a pack of its
own, so a spike at one short length fills its rows alone). A pack closes when it holds `max_sequences_per_pack`
sequences or no room is left.

Invariant: the plan places every counted sequence exactly once, no pack holds more than S tokens or more than
`max_sequences_per_pack` sequences, and the plan depends only on its arguments.

Example (six sequences in three rows of at most 8 tokens):

>>> import numpy as np
>>> plan_packs(np.bincount([6, 5, 3, 2, 2, 1]), seq_length=8, max_sequences_per_pack=3)
[Pack(lengths=(5, 3), count=1), Pack(lengths=(6, 2), count=1), Pack(lengths=(2, 1), count=1)]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Pack:
    """`count` rows, each holding one sequence of each of `lengths` (longest first)."""

    lengths: tuple[int, ...]
    count: int


def plan_packs(histogram: Sequence[int], seq_length: int, max_sequences_per_pack: int) -> list[Pack]:
    """SPFHP on `histogram` (`histogram[L]` sequences of L tokens, L = 0..seq_length; length 0 is not counted).

    Returns the packs, in the order they were closed or last touched: deterministic for the same arguments.
    """
    counts = np.asarray(histogram, np.int64)
    if len(counts) > seq_length + 1 and counts[seq_length + 1 :].any():
        raise ValueError(f"the histogram counts sequences longer than seq_length={seq_length}")
    if max_sequences_per_pack < 1:
        raise ValueError(f"max_sequences_per_pack={max_sequences_per_pack} must be at least 1")
    # open_by_room[r]: packs of r free tokens that can still take a sequence, as [lengths, count] groups.
    open_by_room: list[list[list]] = [[] for _ in range(seq_length + 1)]
    closed: list[Pack] = []

    def place(lengths: tuple[int, ...], count: int, room: int) -> None:
        if len(lengths) == max_sequences_per_pack or room == 0:
            closed.append(Pack(lengths, count))
        else:
            open_by_room[room].append([lengths, count])

    for length in range(min(len(counts) - 1, seq_length), 0, -1):
        todo = int(counts[length])
        room = seq_length  # only packs with less room than this were left by longer lengths
        while todo:
            room = next((r for r in range(room, length - 1, -1) if open_by_room[r]), None)
            if room is None:  # new packs, each filled with this length as far as it goes, as one at a time would
                per_pack = min(max_sequences_per_pack, seq_length // length)
                for size, count in ((per_pack, todo // per_pack), (todo % per_pack, 1)):
                    if size and count:
                        place((length,) * size, count, seq_length - size * length)
                break
            group = open_by_room[room][-1]
            taken = min(group[1], todo)
            group[1] -= taken
            if not group[1]:
                open_by_room[room].pop()
            place(group[0] + (length,), taken, room - length)
            todo -= taken
    closed.extend(Pack(lengths, count) for groups in open_by_room for lengths, count in groups)
    return closed


def padding_share(plan: Sequence[Pack], seq_length: int) -> float:
    """The share of the plan's row tokens that are padding."""
    rows = sum(pack.count for pack in plan)
    tokens = sum(pack.count * sum(pack.lengths) for pack in plan)
    return 1 - tokens / max(1, rows * seq_length)
