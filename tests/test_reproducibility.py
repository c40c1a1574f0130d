"""Real algorithms: same seed, same EpochStats; zipped runs equal their solo runs."""

from __future__ import annotations

from typing import Any

import pytest

from epochtrain import make_trainer
from tests.trainer.test_base import comparable

SHORT: dict[str, dict[str, Any]] = {
    "dqn": {"max_epoch": 2, "step_per_epoch": 512, "warmup_steps": 256, "stop_fn": None},
    "ppo": {"max_epoch": 2, "step_per_epoch": 512, "stop_fn": None},
}


def run(algo: str, seed: int) -> list[Any]:
    trainer = make_trainer(algo, "CartPole-v1", seed=seed, show_progress=False, **SHORT[algo])
    return [comparable(s) for s in trainer]


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_same_seed_same_epoch_stats(algo: str) -> None:
    assert run(algo, 3) == run(algo, 3)


def test_zipped_dqn_and_ppo_match_their_solo_runs() -> None:
    solo_dqn, solo_ppo = run("dqn", 1), run("ppo", 2)
    dqn = make_trainer("dqn", "CartPole-v1", seed=1, show_progress=False, **SHORT["dqn"])
    ppo = make_trainer("ppo", "CartPole-v1", seed=2, show_progress=False, **SHORT["ppo"])
    pairs = [(comparable(a), comparable(b)) for a, b in zip(dqn, ppo, strict=True)]
    assert [a for a, _ in pairs] == solo_dqn
    assert [b for _, b in pairs] == solo_ppo
    assert solo_dqn[0]["training_stat"]["loss"]["mean"] > 0
