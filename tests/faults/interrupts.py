"""Interrupting a write at each of its file-system calls, for the tests that check that an
interrupted save or recording leaves the old files whole and nothing half-made."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any


@contextmanager
def interrupt_at_call(n: int, when: str, calls: Sequence[tuple[Any, str]]) -> Iterator[list[int]]:
    """Raise KeyboardInterrupt at the ``n``-th call of any of ``calls`` (``(module, name)``
    pairs, counted together), ``"before"`` it runs or ``"after"`` it has returned or raised
    (as a signal handled as a system call returns: a stop sent by another thread, which
    takes the GIL while this one is in one). Yields the count of calls made so far."""
    count = [0]
    originals = {(mod, name): getattr(mod, name) for mod, name in calls}

    def wrap(fn: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            if count[0] == n and when == "before":
                raise KeyboardInterrupt
            at = count[0]
            try:
                return fn(*args, **kwargs)
            finally:
                if at == n:  # whether the call returned or raised (an existing dir)
                    raise KeyboardInterrupt

        return wrapped

    for (mod, name), fn in originals.items():
        setattr(mod, name, wrap(fn))
    try:
        yield count
    finally:
        for (mod, name), fn in originals.items():
            setattr(mod, name, fn)
