"""The algorithm and the env a :class:`~epochtrain.spec.RunSpec` names, looked up and checked:
:func:`algorithm` (the registry entry), :func:`check_env_id` (a registered gymnasium env,
with the fix for a namespace whose package is not imported) and :func:`reward_threshold`
(where a spec stops by default). :mod:`epochtrain.spec` holds the spec itself and
re-exports these."""

from __future__ import annotations

import types
from collections.abc import Mapping

import gymnasium as gym

from epochtrain.envs import env_spec
from epochtrain.registry import ALGORITHMS, Algorithm
from epochtrain.suggestions import close_matches

__all__ = ["algorithm", "check_env_id", "reward_threshold"]


def algorithm(name: str) -> Algorithm:
    """The registry entry of ``name``; ``ValueError`` naming the registered ones."""
    if name not in ALGORITHMS:
        raise ValueError(
            f"algo must be one of {sorted(ALGORITHMS)}, got {name!r}"
            f"{close_matches(name, ALGORITHMS)}"
        )
    return ALGORITHMS[name]


def reward_threshold(env_id: str) -> float | None:
    """The ``reward_threshold`` of the registered env ``env_id`` as a float, None when its
    spec has none: where :meth:`RunSpec.default` stops."""
    threshold = env_spec(env_id).reward_threshold
    return None if threshold is None else float(threshold)


def check_env_id(env_id: str) -> None:
    """``ValueError`` unless ``env_id`` is a registered gymnasium env (``"module:EnvId"``
    imports ``module`` first, :func:`~epochtrain.envs.env_spec`); ``TypeError`` for an
    env object."""
    if not isinstance(env_id, str):
        raise TypeError(
            f"env_id must be a gymnasium env id (str) such as 'CartPole-v1', got a "
            f"{type(env_id).__name__}: register the env (gymnasium.register(id, entry_point)) "
            "and pass its id, or build a trainer from your own vector env (README: Building "
            "the pieces by hand)"
        )
    try:
        env_spec(env_id)
    except gym.error.NamespaceNotFound as exc:
        raise ValueError(_namespace_not_found(env_id)) from exc
    except gym.error.Error as exc:
        raise ValueError(
            f"env_id {env_id!r} is not a registered gymnasium env ({exc}); use an id such as "
            "'CartPole-v1', or 'your_package.envs:YourEnv-v0' for an env your package registers"
        ) from exc


_NAMESPACE_PACKAGES: Mapping[str, tuple[str, str]] = types.MappingProxyType(
    {"ALE": ("ale-py", "ale_py")}
)
"""Env namespaces whose package is known: ``{namespace: (pip name, module)}``."""


def _namespace_not_found(env_id: str) -> str:
    """Why ``env_id``'s namespace (``ALE`` of ``ALE/Pong-v5``) is not registered: its
    package is not imported (gymnasium >= 1.0 imports none by itself), and the
    ``module:EnvId`` form that imports it."""
    module, _, name = env_id.rpartition(":")
    namespace = name.partition("/")[0]
    known = _NAMESPACE_PACKAGES.get(namespace)
    if known is not None and not module:
        pip_name, known_module = known
        return (
            f"env_id {env_id!r}: namespace {namespace!r} is registered by the package "
            f"{pip_name}, which gymnasium does not import by itself: install it (pip install "
            f"{pip_name}) and pass '{known_module}:{name}', which imports {known_module} first "
            f"(in Python, `import {known_module}` before building also works)"
        )
    if module:
        return (
            f"env_id {env_id!r}: the module {module!r} was imported but registers no env in "
            f"the namespace {namespace!r}: check the id, or name the module that registers it"
        )
    return (
        f"env_id {env_id!r}: no env is registered in the namespace {namespace!r}; install "
        f"the package that registers it and pass '<its module>:{name}' (the module is "
        "imported first, which registers its envs)"
    )
