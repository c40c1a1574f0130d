"""Logger states on resume: matching a checkpoint's logger states to a run's loggers.

A checkpoint holds one state per logger of the run (:meth:`BaseLogger.state_dict
<epochtrain.logger.BaseLogger.state_dict>`: its kind, destination and last step per
scope). :func:`match_states` pairs those states with the loggers of the resumed run, which
may have dropped, added or moved some; :func:`kept_past_position` says which points a
tracking run (W&B, MLflow) kept past the restored position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from epochtrain.logger.tags import SCOPES, Scope, tag_scope

if TYPE_CHECKING:
    from epochtrain.logger.base import BaseLogger

__all__ = ["describe_state", "kept_past_position", "logger_states", "match_states"]


def _scope_steps(state: Mapping[str, object], what: str) -> dict[Scope, int | None]:
    restored: dict[Scope, int | None] = {}
    for scope in SCOPES:
        if scope not in state:
            raise ValueError(f"{what} is missing the key {scope!r}; got {state!r}")
        value = state[scope]
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"{what}[{scope!r}] must be an int or None, got {value!r}")
        restored[scope] = value
    return restored


def logger_states(state: Mapping[str, object]) -> list[Mapping[str, object]]:
    """The per-logger states in a checkpoint's logger ``state``: a
    :class:`~epochtrain.logger.MultiLogger`'s ``"loggers"`` list, or ``[state]``."""
    states = state.get("loggers", [state])
    if not isinstance(states, list) or not all(isinstance(s, Mapping) for s in states):
        raise ValueError(f"logger state['loggers'] must be a list of mappings, got {states!r}")
    return states


def match_states(
    loggers: Sequence[BaseLogger], states: Sequence[Mapping[str, object]]
) -> list[Mapping[str, object] | None]:
    """For each of ``loggers``, its state among ``states`` (``None``: it was not in the
    checkpointed run, so it starts fresh); states no logger takes are ignored.

    A state is matched by its ``"kind"`` (the logger's class) and ``"destination"``
    (its file or directory) first, then by kind alone where that is unambiguous (the
    run directory was moved). States of older checkpoints carry neither: they are taken
    in order, and a list of another length raises ``ValueError``."""
    if not any("kind" in state for state in states):
        if len(states) != len(loggers):
            raise ValueError(
                f"the checkpoint holds the states of {len(states)} loggers without their kinds, "
                f"this trainer has {len(loggers)}: they cannot be matched"
            )
        return list(states)
    matched: list[Mapping[str, object] | None] = [None] * len(loggers)
    free = list(range(len(states)))
    for exact in (True, False):
        for i, logger in enumerate(loggers):
            same = [j for j in free if states[j].get("kind") == logger.kind]
            if exact:
                same = [j for j in same if states[j].get("destination") == logger.destination]
            elif (
                len(same) != 1
                or sum(
                    lg.kind == logger.kind and m is None
                    for lg, m in zip(loggers, matched, strict=True)
                )
                > 1
            ):
                continue  # two of a kind, both moved: which is which is unknown
            if matched[i] is None and same:
                matched[i] = states[same[0]]
                free.remove(same[0])
    return matched


def describe_state(state: Mapping[str, object]) -> str:
    """``"JSONLLogger('run/log.jsonl')"`` for a logger state (``"a logger"`` if older)."""
    kind, destination = state.get("kind", "a logger"), state.get("destination")
    return f"{kind}({destination!r})" if destination is not None else str(kind)


def kept_past_position(
    position: Mapping[Scope, int | None], held: Mapping[str, float]
) -> str | None:
    """The steps a tracking run already ``held`` (per tag) past a restored ``position``
    (per scope), as ``"info (4, 5], train (4000, 5000]"``; ``None`` if there are none.

    W&B and MLflow cannot delete points, so on a resume these keep the values the
    interrupted process logged after its checkpoint; this says which they are."""
    last: dict[Scope, float] = {}
    for tag, step in held.items():
        scope = tag_scope(tag)
        if scope is not None:
            last[scope] = max(step, last.get(scope, step))
    spans = []
    for scope in SCOPES:
        start, end = position.get(scope), last.get(scope)
        if end is not None and start is None:
            spans.append(f"{scope} up to {end:.15g}")
        elif end is not None and start is not None and end > start:
            spans.append(f"{scope} ({start}, {end:.15g}]")
    return ", ".join(spans) or None
