"""Suggestions for a mistyped name: ``" (did you mean 'lr'?)"``, for settings, sections and
algorithms alike (:func:`close_matches`).

The names of other libraries' settings (:data:`OTHER_LIBRARY_NAMES`: Stable-Baselines3's
``n_epochs`` is ``repeat_per_collect`` here) suggest their counterparts, which spelling
alone would miss. The configs whose field names these suggest are in :mod:`epochtrain.config`.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping

__all__ = ["OTHER_LIBRARY_NAMES", "close_matches"]


OTHER_LIBRARY_NAMES: Mapping[str, tuple[str, ...]] = types.MappingProxyType(
    {
        # Stable-Baselines3 (constructor and ``learn`` arguments)
        "learning_rate": ("lr",),
        # off-policy (SB3 >= 2.7): n-step returns; on-policy: env steps per env per rollout
        "n_steps": ("n_step", "step_per_collect"),
        "n_epochs": ("repeat_per_collect",),
        "n_envs": ("num_envs",),
        "learning_starts": ("warmup_steps",),
        "train_freq": ("step_per_collect",),
        "gradient_steps": ("update_per_step",),
        "target_update_interval": ("target_update_freq",),
        "exploration_fraction": ("epsilon_decay_steps",),
        "exploration_initial_eps": ("epsilon_start",),
        "exploration_final_eps": ("epsilon_end",),
        "ent_coef": ("alpha", "auto_alpha"),  # SAC's temperature; "auto" tunes it
        "target_policy_noise": ("policy_noise",),
        "target_noise_clip": ("noise_clip",),
        "action_noise": ("exploration_noise",),
        "net_arch": ("hidden",),
        "rms_prop_eps": ("rms_eps",),
        "total_timesteps": ("max_epoch", "step_per_epoch"),
        # Tianshou v2 trainer params and algorithm arguments (v1: estimation_step, eps_clip)
        "max_epochs": ("max_epoch",),
        "epoch_num_steps": ("step_per_epoch",),
        "collection_step_num_env_steps": ("step_per_collect",),
        "collection_step_num_episodes": ("episode_per_collect",),
        "update_step_num_repetitions": ("repeat_per_collect",),
        "update_step_num_gradient_steps_per_sample": ("update_per_step",),
        "test_step_num_episodes": ("episode_per_test",),
        "test_in_training": ("test_in_train",),
        "num_training_envs": ("num_envs",),
        "n_step_return_horizon": ("n_step",),
        "estimation_step": ("n_step",),
        "eps_clip": ("clip_range",),
        "hidden_sizes": ("hidden",),
    }
)
"""Setting names of Stable-Baselines3 and Tianshou -> the epochtrain settings that play their
part, for the "did you mean" of an unknown name (spelling alone misleads: SB3's ``n_epochs``
is ``repeat_per_collect``, not ``max_epoch``)."""


def close_matches(name: str, choices: typing.Iterable[str], *, spelling: bool = True) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices``, or ``""``.

    A name from another library (:data:`OTHER_LIBRARY_NAMES`) suggests its counterparts
    among ``choices`` and nothing else; ``lr`` where only per-network rates exist suggests
    them (``actor_lr``, ``critic_lr``...); any other name, the closest spellings, unless
    ``spelling`` is False (a name spelt right that belongs elsewhere: ``update_per_step``
    for ppo suggests no ``step_per_epoch``). Case is ignored (``PPO`` suggests ``ppo``).
    """
    pool = sorted(set(choices))
    lowered: dict[str, list[str]] = {}
    for choice in pool:
        lowered.setdefault(choice.lower(), []).append(choice)
    key = name.lower()
    wanted = OTHER_LIBRARY_NAMES.get(key, (key,))
    found = [c for w in wanted for c in lowered.get(w, []) if c != name]
    if "lr" in wanted and "lr" not in pool:
        found += [c for c in pool if c.endswith("_lr")]
    if not found and spelling and key not in OTHER_LIBRARY_NAMES:
        close = difflib.get_close_matches(key, list(lowered), n=3, cutoff=0.6)
        found = [c for w in close for c in lowered[w] if c != name]
    if not found:
        return ""
    return " (did you mean " + " or ".join(repr(f) for f in found) + "?)"
