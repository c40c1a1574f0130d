"""record_dataset and `epochtrain collect`: datasets the offline trainers can read."""

from __future__ import annotations

import json
import os
import random
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from epochtrain.cli import main
from epochtrain.data import ReplayBuffer
from epochtrain.dataset import dataset_fingerprint, record_dataset
from tests.fakes import SHIFTED_ACTIONS


def episode_returns(buffer: ReplayBuffer) -> list[float]:
    """Returns of the episodes that end in a one-env buffer, summed from its rows."""
    batch = buffer.rollout()
    returns, total = [], 0.0
    for rew, done in zip(batch.rew[:, 0].tolist(), batch.done[:, 0].tolist(), strict=True):
        total += rew
        if done:
            returns.append(total)
            total = 0.0
    return returns


def test_random_dataset_round_trips_and_its_sidecar_tells_the_truth(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "cartpole.buf"
    info = record_dataset(None, "CartPole-v1", 600, path, seed=3)
    buffer = ReplayBuffer.load(path)
    assert buffer.n_valid == 600 == info.n_steps
    returns = episode_returns(buffer)
    assert info.n_episodes == len(returns) > 5
    assert info.return_mean == pytest.approx(np.mean(returns))
    assert info.return_max == max(returns)
    sidecar = json.loads(path.with_name("cartpole.buf.json").read_text())
    assert sidecar["return_mean"] == info.return_mean and sidecar["policy"] == "random"
    # written atomically: nothing left over
    assert sorted(p.name for p in path.parent.iterdir()) == ["cartpole.buf", "cartpole.buf.json"]


def test_same_seed_gives_the_same_data_and_leaves_global_rng_alone(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    before = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    record_dataset(None, "CartPole-v1", 300, tmp_path / "a.buf", seed=5)
    after = (random.random(), np.random.rand(), torch.rand(1).item())
    assert before == after
    record_dataset(None, "CartPole-v1", 300, tmp_path / "b.buf", seed=5)
    record_dataset(None, "CartPole-v1", 300, tmp_path / "c.buf", seed=6)
    a, b, c = (ReplayBuffer.load(tmp_path / f"{n}.buf").rollout() for n in "abc")
    assert torch.equal(a.act, b.act) and a.rew.tolist() == b.rew.tolist()
    assert not torch.equal(a.act, c.act)


def test_dataset_of_a_policy_uses_its_actions(tmp_path: Path) -> None:
    from epochtrain.factory import make_trainer

    policy = make_trainer("ppo", "CartPole-v1", seed=0).policy
    info = record_dataset(policy, "CartPole-v1", 400, tmp_path / "p.buf", deterministic=True)
    buffer = ReplayBuffer.load(tmp_path / "p.buf")
    batch = buffer.rollout().flatten()
    greedy, _ = policy.act(batch.obs, deterministic=True)
    assert torch.equal(greedy, batch.act)
    assert info.policy == "PPO" and info.deterministic


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"n_steps": 0}, "n_steps"), ({"num_envs": 0}, "num_envs"), ({"n_steps": 5}, "no episode")],
)
def test_bad_arguments_are_refused_before_writing(
    tmp_path: Path, kwargs: dict[str, int], match: str
) -> None:
    args = {"n_steps": 100, **kwargs}
    with pytest.raises(ValueError, match=match):
        record_dataset(None, "CartPole-v1", args.pop("n_steps"), tmp_path / "x.buf", **args)
    assert not (tmp_path / "x.buf").exists()


def test_collect_command_records_and_train_reads_the_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "expert.buf"
    argv = ["collect", "--env", "CartPole-v1", "--random", "--steps", "500", "--out", str(out)]
    assert main(argv) == 0
    assert "Recorded 500 env steps" in capsys.readouterr().out
    assert ReplayBuffer.load(out).n_valid == 500
    train = ["train", "--algo", "bc", "--env", "CartPole-v1", "--dataset", str(out)]
    train += ["--max-epoch", "1", "--step-per-epoch", "5", "--no-progress", "--logdir", ""]
    assert main(train) == 0
    assert "Finished" in capsys.readouterr().out


def test_collect_with_algo_trains_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "medium.buf"
    argv = ["collect", "--env", "CartPole-v1", "--algo", "ppo", "--train-steps", "2048"]
    argv += ["--steps", "300", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "trained ppo for 2048 env steps" in printed
    assert json.loads(out.with_name("medium.buf.json").read_text())["policy"].startswith("ppo")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--random", "--steps", "0"], "--steps must be >= 1"),
        (["--random", "--steps", "10", "--train-steps", "5"], "need --algo"),
        (["--algo", "ppo", "--steps", "10"], "--train-steps and/or --train-until"),
        (["--env", "NoSuchEnv-v0", "--algo", "ppo", "--train-steps", "5", "--steps", "9"], "env"),
    ],
)
def test_collect_command_errors_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["collect", "--env", "CartPole-v1", "--out", str(tmp_path / "x.buf"), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "x.buf").exists()


def test_collect_from_a_checkpoint_records_that_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from epochtrain.checkpoint import load_policy
    from epochtrain.factory import make_trainer

    ckpts = tmp_path / "ckpts"
    train = ["train", "--algo", "ppo", "--step-per-epoch", "256", "--max-epoch", "1"]
    train += ["--no-progress", "--quiet", "--logdir", "", "--checkpoint-dir", str(ckpts)]
    assert main(train) == 0
    out = tmp_path / "ckpt.buf"
    argv = ["collect", "--env", "CartPole-v1", "--checkpoint", str(ckpts), "--deterministic"]
    assert main([*argv, "--steps", "300", "--out", str(out)]) == 0
    assert "from" in json.loads(out.with_name("ckpt.buf.json").read_text())["policy"]
    policy = make_trainer("ppo", "CartPole-v1", seed=123).policy
    load_policy(policy, ckpts)
    batch = ReplayBuffer.load(out).rollout().flatten()
    assert torch.equal(policy.act(batch.obs, deterministic=True)[0], batch.act)
    capsys.readouterr()
    wrong_env = ["collect", "--env", "Acrobot-v1", "--checkpoint", str(ckpts), "--steps", "9"]
    assert main([*wrong_env, "--out", str(tmp_path / "w.buf")]) == 2
    assert "trained on CartPole-v1" in capsys.readouterr().err


def test_box_actions_are_stored_as_the_env_applies_them(tmp_path: Path) -> None:
    from epochtrain.factory import make_trainer

    policy = make_trainer("ppo", "Pendulum-v1", seed=0, log_std_init=1.5).policy
    record_dataset(policy, "Pendulum-v1", 400, tmp_path / "p.buf")
    act = ReplayBuffer.load(tmp_path / "p.buf").rollout().act
    assert float(act.abs().max()) == 2.0  # the wide Gaussian samples past +-2, clipped


def test_a_random_dataset_of_a_discrete_space_with_a_start_holds_the_policys_indices(
    tmp_path: Path,
) -> None:
    record_dataset(None, SHIFTED_ACTIONS, 40, tmp_path / "s.buf")  # actions 5, 6, 7
    rollout = ReplayBuffer.load(tmp_path / "s.buf").rollout()
    assert set(rollout.act.unique().tolist()) == {0, 1, 2}
    assert torch.equal(rollout.act + 5, rollout.rew.long())  # the env got 5, 6, 7 (its reward)


def test_a_normalized_run_is_evaluated_and_recorded_through_its_statistics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A policy trained with an ObservationNormalizer acts on normalised observations:
    `eval` and `collect --checkpoint` must feed it those (with the run's statistics and
    clip), while the dataset keeps the raw observations."""
    from epochtrain.checkpoint import load_hook_states, load_policy
    from epochtrain.factory import make_trainer
    from epochtrain.trainer import ObservationNormalizer

    ckpts = tmp_path / "ckpts"
    normalizer = ObservationNormalizer(clip=0.5)  # a clip the defaults would not restore
    trainer = make_trainer(
        "ppo", "CartPole-v1", seed=0, hooks=[normalizer], checkpoint_dir=ckpts,
        max_epoch=1, step_per_epoch=256, stop_fn=None, show_progress=False,
    )  # fmt: skip
    trainer.run()
    ((name, state),) = load_hook_states(ckpts)
    assert name == "ObservationNormalizer" and state["clip"] == 0.5

    out = tmp_path / "norm.buf"
    argv = ["collect", "--env", "CartPole-v1", "--checkpoint", str(ckpts), "--deterministic"]
    assert main([*argv, "--steps", "300", "--out", str(out)]) == 0
    batch = ReplayBuffer.load(out).rollout().flatten()
    assert isinstance(batch.obs, torch.Tensor)
    assert batch.obs.abs().max() > 0.5  # raw observations, not clipped normalised ones
    policy = make_trainer("ppo", "CartPole-v1", seed=123).policy
    load_policy(policy, ckpts)
    seen = torch.from_numpy(normalizer.normalize(batch.obs.numpy()))
    assert torch.equal(policy.act(seen, deterministic=True)[0], batch.act)
    raw_actions = policy.act(batch.obs, deterministic=True)[0]
    assert not torch.equal(raw_actions, batch.act)  # the transform changed what it did

    capsys.readouterr()
    assert main(["eval", str(ckpts), "--episodes", "10", "--seed", "5"]) == 0
    reported = float(capsys.readouterr().out.split("mean return ")[1].split()[0])
    test_collector = trainer.test_collector
    assert test_collector is not None  # it tests through the normaliser, as eval must
    test_collector.reset(seed=5)
    stat = test_collector.collect(n_episode=10)  # the same 10 envs as eval builds
    assert stat.returns_stat is not None
    assert reported == pytest.approx(stat.returns_stat.mean, abs=0.01)


def test_obs_transform_without_a_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="obs_transform needs a policy"):
        record_dataset(None, "CartPole-v1", 100, tmp_path / "r.buf", obs_transform=np.tanh)
    assert not (tmp_path / "r.buf").exists()


def test_an_existing_dataset_is_refused_before_any_work_and_replaced_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "data.buf"
    record_dataset(None, "CartPole-v1", 300, out, seed=0)
    saved = out.read_bytes(), out.with_name("data.buf.json").read_bytes()
    argv = ["collect", "--env", "CartPole-v1", "--out", str(out), "--steps", "500"]
    # refused before training: the 10^6 training steps would take minutes
    assert main([*argv, "--algo", "ppo", "--train-steps", "1000000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "exists (300 env steps of CartPole-v1 by random)" in err and "--overwrite" in err
    with pytest.raises(FileExistsError, match="overwrite=True"):
        record_dataset(None, "CartPole-v1", 500, out, seed=1)
    assert (out.read_bytes(), out.with_name("data.buf.json").read_bytes()) == saved

    # with overwrite the new pair replaces the old one as one: interrupted as the buffer
    # file is renamed into place (tests/test_dataset_leftovers.py: at every step), the
    # old pair stays whole
    rename, calls = os.rename, [0]

    def interrupted(src: str, dst: str) -> None:
        rename(src, dst)
        calls[0] += 1
        if calls[0] == 3:  # the sidecar, then the buffer file moved aside; the new buffer in
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        record_dataset(None, "CartPole-v1", 500, out, seed=1, overwrite=True)
    assert (out.read_bytes(), out.with_name("data.buf.json").read_bytes()) == saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.buf", "data.buf.json"]
    monkeypatch.undo()
    assert main([*argv, "--random", "--overwrite"]) == 0
    assert ReplayBuffer.load(out).n_valid == 500
    assert json.loads(out.with_name("data.buf.json").read_text())["n_steps"] == 500


def test_dataset_files_get_the_mode_of_any_file_the_user_writes(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        record_dataset(None, "CartPole-v1", 300, tmp_path / "shared.buf", seed=0)
    finally:
        os.umask(old)
    for name in ("shared.buf", "shared.buf.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name


def test_the_fingerprint_follows_the_data_not_the_path(tmp_path: Path) -> None:
    record_dataset(None, "CartPole-v1", 200, tmp_path / "a.buf", seed=0)
    record_dataset(None, "CartPole-v1", 200, tmp_path / "b.buf", seed=1)
    (tmp_path / "moved").mkdir()
    (tmp_path / "a.buf").rename(tmp_path / "moved" / "a.buf")
    data = ReplayBuffer.load(tmp_path / "moved" / "a.buf")
    fingerprint = dataset_fingerprint(data)
    assert len(fingerprint) == 64 and set(fingerprint) <= set("0123456789abcdef")
    again = ReplayBuffer(data.capacity, data.num_envs)
    again.load_state_dict(data.state_dict())
    assert dataset_fingerprint(again) == fingerprint  # same data, another buffer object
    assert dataset_fingerprint(ReplayBuffer.load(tmp_path / "b.buf")) != fingerprint
    state = data.state_dict()
    state["storage"]["act"][7, 0] = 1 - state["storage"]["act"][7, 0]  # one action flipped
    again.load_state_dict(state)
    assert dataset_fingerprint(again) != fingerprint
