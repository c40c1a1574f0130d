"""check_policy_spaces: whether a policy built for its spaces can act on a vector env.

:func:`unsupported_action_space_note` says how to fit an action space no algorithm takes
(MultiDiscrete, MultiBinary, Tuple, Dict) into one they do; the algorithms' refusals end
with it.

The :class:`~epochtrain.data.collector.Collector` calls it when it is built, before any env
is stepped: the observation and action spaces must be of the same kinds and shapes (sizes
of a ``Discrete``, keys of a ``Dict``, ...); bounds and dtypes may differ, except the
action bounds of a policy that scales its actions to its own (SAC, TD3, DDPG: they are not
clipped to the env's). A trainer's own
check of its collectors' envs is :func:`epochtrain.trainer.checks.check_env_spaces`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

__all__ = ["check_policy_spaces", "unsupported_action_space_note"]


def check_policy_spaces(policy: object, env: gym.vector.VectorEnv[Any, Any, Any]) -> None:
    """Raise ``ValueError`` unless a policy built for its ``observation_space`` and
    ``action_space`` can act on ``env``: the same kinds of space, of the same shapes
    (sizes of a ``Discrete``, keys of a ``Dict``, ...). Bounds and dtypes may differ (the
    collector clips actions to the env's bounds), but not the action bounds of a policy
    with ``bounded_actions`` (its tanh is scaled to its own bounds, and its actions are
    not clipped), and so may a ``Discrete`` action space's
    ``start`` (actions are shifted to the env's). Only a module that records both spaces
    (every :class:`~epochtrain.Policy`) is checked: another :class:`~epochtrain.data.Actor`
    (a wrapper that transforms observations, a random actor holding the batched action
    space) is not."""
    owns = [getattr(policy, f"{kind}_space", None) for kind in ("observation", "action")]
    if not isinstance(policy, torch.nn.Module) or not all(isinstance(o, gym.Space) for o in owns):
        return
    for kind, own, theirs in (
        ("observation", owns[0], env.single_observation_space),
        ("action", owns[1], env.single_action_space),
    ):
        assert isinstance(own, gym.Space)
        bounds = kind == "action" and bool(getattr(policy, "bounded_actions", False))
        why = _space_mismatch(own, theirs, with_start=kind == "observation", bounds=bounds)
        if why is not None:
            name = type(policy).__name__
            raise ValueError(
                f"the policy ({name}) was built for the {kind} space {_describe(own)}, but "
                f"env's is {_describe(theirs)} ({why}): build the policy from the envs it acts on, "
                f"{name}(env.single_observation_space, env.single_action_space, ...), or "
                "give the collector envs of the spaces the policy was built for"
            )


def _describe(space: gym.Space[Any]) -> str:
    """A space in a few words: a Box by its shape and dtype (its bounds may be long)."""
    if isinstance(space, gym.spaces.Box):
        return f"Box(shape={space.shape}, {space.dtype})"
    return str(space)


def _space_mismatch(
    own: gym.Space[Any], theirs: gym.Space[Any], *, with_start: bool, bounds: bool = False
) -> str | None:
    """Why a policy built for ``own`` cannot take or give the values of ``theirs``, or None
    (``bounds``: a Box's bounds must be the same too)."""
    spaces = gym.spaces
    if type(own) is not type(theirs):
        return f"a {type(own).__name__}, not a {type(theirs).__name__}"
    if isinstance(own, spaces.Box | spaces.MultiBinary | spaces.MultiDiscrete):
        if own.shape != theirs.shape:
            return f"shape {own.shape} vs {theirs.shape}"
        if bounds and isinstance(own, spaces.Box) and not _same_bounds(own, theirs):
            assert isinstance(theirs, spaces.Box)
            return (
                f"bounds [{own.low.tolist()}, {own.high.tolist()}] vs "
                f"[{theirs.low.tolist()}, {theirs.high.tolist()}]: its actions are "
                "scaled to its own bounds and not clipped to the env's"
            )
        if isinstance(own, spaces.MultiDiscrete):
            assert isinstance(theirs, spaces.MultiDiscrete)
            if not np.array_equal(own.nvec, theirs.nvec):
                return f"nvec {own.nvec.tolist()} vs {theirs.nvec.tolist()}"
    elif isinstance(own, spaces.Discrete):
        assert isinstance(theirs, spaces.Discrete)
        if own.n != theirs.n:
            return f"{int(own.n)} values vs {int(theirs.n)}"
        if with_start and own.start != theirs.start:
            return f"start {int(own.start)} vs {int(theirs.start)}"
    elif isinstance(own, spaces.Dict):
        assert isinstance(theirs, spaces.Dict)
        if set(own.spaces) != set(theirs.spaces):
            return f"keys {sorted(own.spaces)} vs {sorted(theirs.spaces)}"
        for key, sub in own.spaces.items():
            why = _space_mismatch(sub, theirs.spaces[key], with_start=with_start)
            if why is not None:
                return f"key {key!r}: {why}"
    elif isinstance(own, spaces.Tuple):
        assert isinstance(theirs, spaces.Tuple)
        if len(own.spaces) != len(theirs.spaces):
            return f"{len(own.spaces)} entries vs {len(theirs.spaces)}"
        for i, (a, b) in enumerate(zip(own.spaces, theirs.spaces, strict=True)):
            why = _space_mismatch(a, b, with_start=with_start)
            if why is not None:
                return f"entry {i}: {why}"
    return None


def _same_bounds(own: gym.spaces.Box, theirs: gym.Space[Any]) -> bool:
    return (
        isinstance(theirs, gym.spaces.Box)
        and np.array_equal(own.low, theirs.low)
        and np.array_equal(own.high, theirs.high)
    )


def unsupported_action_space_note(space: gym.Space[Any]) -> str:
    """For an action ``space`` of a kind no epochtrain algorithm takes (``MultiDiscrete``,
    ``MultiBinary``, ``Tuple``, ``Dict``): ``": <kind> action spaces are not supported; <a
    way to fit it into a Discrete or a Box>"``, to end a refusal with; ``""`` for any other
    space."""
    wrapper = "with a gymnasium.ActionWrapper you write"
    if isinstance(space, gym.spaces.MultiDiscrete):
        sizes = space.nvec.reshape(-1).tolist()
        return (
            f": MultiDiscrete action spaces are not supported; flatten it into one "
            f"Discrete({int(np.prod(sizes))}) {wrapper} (its action(i) returns "
            f"np.unravel_index(i, {sizes})), or give the env a Box and round in the env"
        )
    if isinstance(space, gym.spaces.MultiBinary):
        n = int(np.prod(space.shape))
        return (
            f": MultiBinary action spaces are not supported; flatten it into one "
            f"Discrete({2**n}) {wrapper} (its action(i) returns the {n} bits of i), or "
            f"give the env a Box(0, 1, ({n},)) and threshold at 0.5 in the env"
        )
    if isinstance(space, gym.spaces.Tuple | gym.spaces.Dict):
        kind = type(space).__name__
        return (
            f": {kind} action spaces are not supported; combine the parts {wrapper}: "
            "Discrete parts into one Discrete (the product of their sizes), Box parts "
            "into one 1-d Box (the concatenation of their bounds)"
        )
    return ""
