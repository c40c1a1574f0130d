"""``with obj:`` for the objects that hold resources: trainers, loggers, progress bars."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["Closing"]


class Closing:
    """Mixin: ``with obj:`` gives ``obj`` and calls ``obj.close()`` when the block ends,
    however it ends (an exception inside the block still propagates)."""

    def close(self) -> None:
        """Release what the object holds; safe to call more than once. Default: nothing."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
