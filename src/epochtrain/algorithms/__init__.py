"""Reference algorithms; each module implements one paper."""

from epochtrain.algorithms.base import Policy

__all__ = ["Policy"]
