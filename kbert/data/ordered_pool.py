"""A function over a stream of work items in worker processes, results in item order, a bounded window in flight.

Invariant: the results, and their order, are those of `map(function, items)` whatever `num_workers`; at most
`2 * num_workers` items are taken from `items` and not yet given back, so memory is bounded by the window, never by
the stream (which is read lazily, as results are consumed).

Example:

```python
for result in ordered_map(functools.partial(work, settings=settings), chunks, num_workers=4):
    write(result)
```
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import multiprocessing
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def ordered_map(
    function: Callable[[Item], Result], items: Iterable[Item], num_workers: int = 1, preload: Sequence[str] = ()
) -> Iterator[Result]:
    """`map(function, items)`, in-process for one worker, else over `num_workers` processes.

    Workers start from a fork server (multiprocessing's `forkserver`), which imports the `preload` modules once
    and runs no TensorFlow op, so they are safe whatever this process has run; `function` and the items must
    pickle, and a script calling this must guard its entry point with `if __name__ == "__main__":`. A worker's
    exception is raised here when its item's turn comes.
    """
    if num_workers == 1:
        yield from map(function, items)
        return
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    items = iter(items)
    pool = concurrent.futures.ProcessPoolExecutor(num_workers, mp_context=context)
    try:
        in_flight = collections.deque(pool.submit(function, item) for item in itertools.islice(items, 2 * num_workers))
        while in_flight:
            result = in_flight.popleft().result()
            in_flight.extend(pool.submit(function, item) for item in itertools.islice(items, 1))
            yield result
    finally:  # on an error (or a consumer that stops early) the queued items are dropped, not run
        pool.shutdown(wait=True, cancel_futures=True)
