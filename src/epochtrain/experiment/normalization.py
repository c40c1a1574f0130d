"""Normalised scores: ``(R - R_random) / (R_reference - R_random)``, comparable across envs.

A normalised score is 0 for a uniformly random policy and 1 for the reference score, so
scores of different envs can be pooled (Agarwal et al. 2021 aggregate Atari on human-
normalised scores the same way). The reference defaults to the env's
``gymnasium.spec(env_id).reward_threshold`` (the return that counts as solving it); the
random score defaults to the mean return of uniformly random actions, measured with a seed.
Either can be given per env instead. Each env's reference must be finite and above its random
score (else the normalised scores are undefined, or rank the worst run first):
:func:`check_reference_scores` checks given values before any work, and
:func:`normalize_scores` refuses what it looks up or measures that breaks the rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from epochtrain.envs import env_spec
from epochtrain.experiment.bootstrap import FloatArray, check_score_dict

__all__ = [
    "NormalizedScores",
    "check_reference_scores",
    "normalize_scores",
    "random_score",
    "reference_score",
]

_MAX_RANDOM_EPISODE_STEPS = 100_000


class NormalizedScores(dict[str, FloatArray]):
    """``{algorithm: [n_runs, n_tasks]}`` of normalised scores, and how they were made.

    A plain dict (rliable and numpy take it as is) that also records the column order and
    each task's random and reference scores; the aggregate statistics accept it across tasks.
    """

    def __init__(
        self,
        scores: Mapping[str, FloatArray],
        *,
        tasks: Sequence[str],
        random_scores: Sequence[float],
        reference_scores: Sequence[float],
    ) -> None:
        super().__init__(scores)
        self.tasks: tuple[str, ...] = tuple(tasks)
        """The env id of each column."""
        self.random_scores: tuple[float, ...] = tuple(random_scores)
        """Each task's raw score that maps to 0."""
        self.reference_scores: tuple[float, ...] = tuple(reference_scores)
        """Each task's raw score that maps to 1."""


def _spec(env_id: str) -> gym.envs.registration.EnvSpec:
    try:
        return env_spec(env_id)
    except gym.error.Error as exc:
        raise ValueError(
            f"env_id {env_id!r} is not a registered gymnasium env ({exc}); "
            "check the id or register the env before normalising"
        ) from exc


def reference_score(env_id: str) -> float:
    """``gymnasium.spec(env_id).reward_threshold``; a ``ValueError`` if the env has none."""
    spec = _spec(env_id)
    if spec.reward_threshold is None:
        raise ValueError(
            f"env {env_id!r} declares no reward_threshold to normalise by; pass "
            f"reference_scores={{{env_id!r}: <return of a good policy>}}"
        )
    return float(spec.reward_threshold)


def random_score(env_id: str, *, episodes: int = 100, seed: int = 0) -> float:
    """Mean return of ``episodes`` episodes of uniformly random actions on ``env_id``.

    Seeded (the env's first reset and the action space), so the same call gives the same
    score. An env that never ends an episode raises ``ValueError``: pass ``random_scores``.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be a positive int, got {episodes!r}")
    _spec(env_id)
    env = gym.make(env_id)
    try:
        env.action_space.seed(seed)
        env.reset(seed=seed)
        returns = []
        for _ in range(episodes):
            total, steps, done = 0.0, 0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total, steps, done = total + float(reward), steps + 1, terminated or truncated
                if steps >= _MAX_RANDOM_EPISODE_STEPS and not done:
                    raise ValueError(
                        f"a random episode of {env_id!r} ran {steps} steps without ending; "
                        f"pass random_scores={{{env_id!r}: <value>}} instead of measuring it"
                    )
            returns.append(total)
            env.reset()
    finally:
        env.close()
    return float(np.mean(returns))


def _per_task(
    given: Mapping[str, float] | None, tasks: Sequence[str] | None, name: str
) -> dict[str, float]:
    given = dict(given or {})
    unknown = sorted(set(given) - set(tasks)) if tasks is not None else []
    if unknown:
        raise ValueError(
            f"{name} names tasks {unknown} that are not in tasks {list(tasks or [])}: "
            "check the env ids"
        )
    for task, value in given.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float | np.integer | np.floating)
            or not math.isfinite(value)
        ):
            raise ValueError(f"{name}[{task!r}] must be a finite number, got {value!r}")
    return {task: float(value) for task, value in given.items()}


def check_reference_scores(
    reference_scores: Mapping[str, float] | None,
    random_scores: Mapping[str, float] | None,
    *,
    tasks: Sequence[str] | None = None,
    reference_name: str = "reference_scores",
    random_name: str = "random_scores",
) -> None:
    """Refuse given normalisation values before any work: each must be a finite number,
    name one of ``tasks`` (when given), and an env given both must have its reference above
    its random score. The ``ValueError`` names ``reference_name`` or ``random_name`` (the
    command line passes ``"--reference"`` and ``"--random"``), the env, the values and the fix.
    """
    refs = _per_task(reference_scores, tasks, reference_name)
    rands = _per_task(random_scores, tasks, random_name)
    for task in refs.keys() & rands.keys():
        _check_bounds(task, refs[task], rands[task], reference_name, random_name, reference_name)


def _check_bounds(
    task: str,
    ref: float,
    rand: float,
    ref_source: str,
    rand_source: str,
    reference_name: str = "reference_scores",
) -> None:
    """``ValueError`` unless ``rand`` is finite and ``ref`` above it; the sources say where
    each value came from (an option, ``reward_threshold``, a measurement), and
    ``reference_name`` is the option that gives a reference."""
    if not math.isfinite(rand):
        raise ValueError(
            f"env {task!r}: its random score ({rand_source}) is {rand}, so no score can be "
            f"normalised: pass random_scores={{{task!r}: <mean return of random actions>}} "
            f"(--random {task}=SCORE from the command line)"
        )
    if not ref > rand:  # also a NaN reference
        relation = "equal to" if ref == rand else "not above"
        raise ValueError(
            f"env {task!r}: reference score {ref:g} ({ref_source}) is {relation} its random "
            f"score {rand:g} ({rand_source}), so normalised scores would be undefined or rank "
            f"the worst run first: give {task} a reference with {reference_name} that a "
            "trained policy reaches, above the random score"
        )


def normalize_scores(
    scores: Mapping[str, npt.ArrayLike],
    tasks: Sequence[str],
    *,
    reference_scores: Mapping[str, float] | None = None,
    random_scores: Mapping[str, float] | None = None,
    random_episodes: int = 100,
    seed: int = 0,
) -> NormalizedScores:
    """Normalise raw ``scores {algorithm: [n_runs, n_tasks]}`` whose columns are ``tasks``.

    Per task, the reference is ``reference_scores[task]`` or else the env's
    ``reward_threshold`` (:func:`reference_score`); the random score is
    ``random_scores[task]`` or else measured over ``random_episodes`` seeded episodes
    (:func:`random_score`).
    """
    checked = check_score_dict(scores)
    n_tasks = next(iter(checked.values())).shape[1]
    if isinstance(tasks, str) or len(tasks) != n_tasks or len(set(tasks)) != len(tasks):
        raise ValueError(
            f"tasks must name each of the {n_tasks} score columns once, in order, got {tasks!r}"
        )
    check_reference_scores(reference_scores, random_scores, tasks=tasks)
    refs = _per_task(reference_scores, tasks, "reference_scores")
    rands = _per_task(random_scores, tasks, "random_scores")
    reference, random = [], []
    for task in tasks:
        ref = refs[task] if task in refs else reference_score(task)
        if task in rands:
            rand, rand_source = rands[task], "random_scores"
        else:
            rand = random_score(task, episodes=random_episodes, seed=seed)
            rand_source = f"measured over {random_episodes} episodes of random actions"
        ref_source = "reference_scores" if task in refs else "its reward_threshold"
        _check_bounds(task, ref, rand, ref_source, rand_source)
        reference.append(ref)
        random.append(rand)
    ref_arr, rand_arr = np.asarray(reference), np.asarray(random)
    normalized = {algo: (arr - rand_arr) / (ref_arr - rand_arr) for algo, arr in checked.items()}
    return NormalizedScores(
        normalized, tasks=tasks, random_scores=random, reference_scores=reference
    )
