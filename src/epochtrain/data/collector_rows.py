"""Row and observation helpers of the :class:`~epochtrain.data.collector.Collector`'s hot
loop: copies of (dict) observations, rows set in them, the final observations of ended
episodes put in place of the next episodes' first, observations as tensors, and the policy's
``act`` as the loop calls it under ``torch.inference_mode()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from epochtrain.data.batch import ActResult, Obs

if TYPE_CHECKING:
    from epochtrain.data.collector import Actor, ObsTransform


def _to_tensor(obs: Any) -> Obs:
    if isinstance(obs, np.ndarray):
        return torch.from_numpy(obs)
    if isinstance(obs, dict):
        return {k: _to_tensor(v) for k, v in obs.items()}
    return torch.as_tensor(obs)


def _inference_act(policy: Actor, obs: Any) -> tuple[Callable[[Obs, bool], ActResult], bool]:
    """What the hot loop calls under ``torch.inference_mode()``: the ``act`` of an epochtrain
    :class:`~epochtrain.Policy` without the no-grad wrapper its class adds (grad is off
    already, so the wrapper would only check that), and whether array observations go in
    as ``torch.from_numpy(obs)``, which is what ``Policy.to_tensor`` gives for a CPU policy
    that keeps it. Any other actor, or an ``act`` set on the instance, is called as is."""
    from epochtrain.algorithms.base import _WITHOUT_GRAD, Policy  # the data layer loads first

    if not isinstance(policy, Policy):
        return policy.act, False
    wrapper = type(policy).act
    own = getattr(wrapper, "__wrapped__", None)
    act = policy.act
    if own is not None and getattr(wrapper, _WITHOUT_GRAD, False) and "act" not in vars(policy):
        act = own.__get__(policy)
    direct = (
        isinstance(obs, np.ndarray)
        and type(policy).to_tensor is Policy.to_tensor
        and policy.device.type == "cpu"
    )
    return act, direct


def _set_row(obs: Any, i: int, value: Any) -> None:
    if isinstance(obs, dict):
        for k in obs:
            _set_row(obs[k], i, value[k])
    else:
        obs[i] = value


def _copy(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: _copy(v) for k, v in obs.items()}
    return obs.copy()


def _with_final_obs(obs_next: Any, final_obs: np.ndarray, done: np.ndarray) -> Any:
    """``obs_next`` with the rows of the envs in ``done`` replaced by their final obs."""
    real_next = _copy(obs_next)
    for i in done.tolist():
        _set_row(real_next, i, final_obs[i])
    return real_next


def _transformed_rows(final: np.ndarray, done: np.ndarray, transform: ObsTransform) -> Any:
    """``final`` (an object array of per-env observations) with rows ``done`` transformed."""
    out = final.copy()
    rows = transform(np.stack([final[i] for i in done.tolist()]), False)
    for j, i in enumerate(done.tolist()):
        out[i] = rows[j]
    return out
