"""TDPriorities: the prioritized-replay side of the value-based policies (DQN, SAC, DDPG/TD3).

Paper: Schaul, Quan, Antonoglou & Silver 2016, "Prioritized Experience Replay" (ICLR).
A :class:`~epochtrain.data.PrioritizedReplayBuffer` sets ``batch.weight`` (importance
weights); the policy's ``learn`` multiplies each sample's TD loss by it
(:func:`weighted_mean`) and records its ``Q`` and TD target (:meth:`TDPriorities.record_td`);
after the step :meth:`TDPriorities.post_learn` hands ``|TD error|`` to the buffer's
``update_priorities``. With twin critics the TD error is that of the critics' mean
``Q``, ``|mean_i Q_i - target|``, as Tianshou's SAC and TD3 (``(td1 + td2) / 2``).

Cost on uniform replay: ``batch.weight`` is None, so the loss is the plain mean;
recording keeps two references (no tensor operation), and ``|TD|`` is computed only when
read, so a uniform buffer never pays for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from epochtrain.data.batch import Batch
from epochtrain.data.prioritized import PrioritizedReplayBuffer

if TYPE_CHECKING:
    from epochtrain.data.buffer import ReplayBuffer

__all__ = ["TDPriorities", "weighted_mean"]


def weighted_mean(per_sample: Tensor, weight: Tensor | None) -> Tensor:
    """The mean of ``per_sample`` losses (``[..., batch]``), each weighted by ``weight``
    (``[batch]``, importance weights) when given: ``mean(per_sample * weight)``."""
    if weight is None:
        return per_sample.mean()
    return (per_sample * weight.to(per_sample.dtype)).mean()


class TDPriorities:
    """Mixin of the policies whose ``learn`` takes a TD step (listed before
    :class:`~epochtrain.algorithms.Policy` among the bases): keeps the last step's ``Q``
    and target, and gives a prioritized buffer the new ``|TD error|`` after each step.

    ``learn`` weights its TD loss by ``batch.weight`` (:func:`weighted_mean`) and calls
    :meth:`record_td`; nothing else is needed.
    """

    _last_td: tuple[Tensor, Tensor] | None = None  # (Q, target) of the last learn

    def record_td(self, q: Tensor, target: Tensor) -> None:
        """Keep ``q`` (``[batch]``, or ``[n_critics, batch]``; detached when read) and
        ``target`` (``[batch]``) of the step just taken, for :attr:`td_abs`."""
        # object's setattr: nn.Module's checks would run on every gradient step
        object.__setattr__(self, "_last_td", (q, target))

    @property
    def td_abs(self) -> Tensor | None:
        """``|TD error|`` per sample of the last ``learn`` (``|mean_i Q_i - target|`` over
        several critics), or None before any; computed when read, so uniform replay never
        pays for it."""
        if self._last_td is None:
            return None
        q, target = self._last_td
        q = q.detach()
        if q.dim() > target.dim():
            q = q.mean(dim=0)
        return (q - target).abs()

    def post_learn(self, batch: Batch, buffer: ReplayBuffer) -> None:
        """Give a prioritized buffer the new ``|TD|`` of the transitions just learned from."""
        if not isinstance(buffer, PrioritizedReplayBuffer):
            return
        td_abs = self.td_abs
        if td_abs is not None:
            assert batch.index is not None  # the buffer's sample sets it
            buffer.update_priorities(batch.index, td_abs)
