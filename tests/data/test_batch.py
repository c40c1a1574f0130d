"""Batch: indexing, flattening, mapping and moving a transition container."""

from __future__ import annotations

import torch

from epochtrain.data import Batch, obs_map


def _batch(time: int = 3, envs: int = 2) -> Batch:
    """A ``[time, env]`` batch whose values encode their position: ``rew = 10 t + e``."""
    rew = torch.arange(time).unsqueeze(1) * 10.0 + torch.arange(envs)
    pos = torch.stack([rew, -rew], dim=-1)
    return Batch(
        obs={"pos": pos, "inner": {"step": rew.long()}},
        act=rew.long() % 2,
        rew=rew,
        terminated=rew.long() % 3 == 0,
        truncated=rew.long() % 5 == 0,
        obs_next={"pos": pos + 1, "inner": {"step": rew.long() + 1}},
        value=rew * 0.5,
    )


def test_indexing_applies_to_every_field_including_nested_obs_and_extras() -> None:
    batch = _batch()
    row = batch[1]
    assert row.rew.tolist() == [10.0, 11.0]
    assert isinstance(row.obs, dict) and isinstance(row.obs["inner"], dict)
    assert row.obs["inner"]["step"].tolist() == [10, 11]
    assert isinstance(row.obs_next, dict)
    assert row.obs_next["pos"].tolist() == [[11.0, -9.0], [12.0, -10.0]]
    assert row.value is not None and row.value.tolist() == [5.0, 5.5]
    assert row.logp is None and row.valid is None  # absent extras stay absent
    picked = batch[torch.tensor([2, 0])]
    assert picked.rew[:, 1].tolist() == [21.0, 1.0]
    assert len(batch[1:]) == 2


def test_every_kind_of_index_picks_the_rows_plain_tensor_indexing_picks() -> None:
    batch = _batch(time=5, envs=2)
    kinds = {
        "int64": torch.tensor([4, 0, 0, 2]),
        "int32": torch.tensor([3, 1], dtype=torch.int32),
        "mask": torch.tensor([True, False, True, False, True]),
        "scalar": torch.tensor(3),
        "slice": slice(1, 4),
        "int": 2,
    }
    for name, index in kinds.items():
        picked = batch[index]
        for got, field in ((picked.rew, batch.rew), (picked.act, batch.act)):
            assert torch.equal(got, field[index]), name
        assert isinstance(picked.obs, dict) and isinstance(batch.obs, dict)
        assert torch.equal(picked.obs["pos"], batch.obs["pos"][index]), name
        assert picked.value is not None and batch.value is not None
        assert torch.equal(picked.value, batch.value[index]), name
        assert picked.logp is None, name


def test_flatten_merges_time_and_env_row_major() -> None:
    batch = _batch(time=3, envs=2)
    flat = batch.flatten()
    assert flat.shape == (6,)
    assert flat.rew.tolist() == [0.0, 1.0, 10.0, 11.0, 20.0, 21.0]  # index t * envs + e
    assert isinstance(flat.obs, dict)
    assert flat.obs["pos"].shape == (6, 2)
    assert flat.obs["inner"]["step"].tolist() == [0, 1, 10, 11, 20, 21]
    assert flat.value is not None and flat.value.shape == (6,)
    assert flat.obs_batch_size() == 6


def test_map_applies_fn_to_every_tensor_and_returns_a_new_batch() -> None:
    batch = _batch()
    seen: list[torch.Size] = []

    def double(t: torch.Tensor) -> torch.Tensor:
        seen.append(t.shape)
        return t * 2

    doubled = batch.map(double)
    # obs (2 tensors), obs_next (2), act, rew, terminated, truncated, value
    assert len(seen) == 9
    assert doubled.rew.tolist() == (batch.rew * 2).tolist()
    assert batch.rew[1, 1] == 11.0  # the original is untouched
    assert isinstance(doubled.obs_next, dict)
    assert doubled.obs_next["inner"]["step"][2, 1] == 44
    assert obs_map(lambda t: t + 1, torch.zeros(2)).tolist() == [1.0, 1.0]


def test_to_cpu_keeps_values_without_copying() -> None:
    batch = _batch()
    moved = batch.to("cpu")
    assert moved.rew is batch.rew
    assert isinstance(moved.obs, dict) and isinstance(batch.obs, dict)
    assert moved.obs["pos"] is batch.obs["pos"]
    assert moved.rew.device == torch.device("cpu")
    assert moved.to(torch.device("cpu")).value is batch.value
    assert batch.to("cpu") is batch  # every tensor there already: the batch itself


def test_to_another_device_moves_every_tensor() -> None:
    batch = _batch()
    moved = batch.to("meta")  # a device every machine has
    assert moved is not batch
    assert all(t.device.type == "meta" for t in moved.tensors())
    assert len(moved.tensors()) == len(batch.tensors())
    assert all(t.device.type == "cpu" for t in batch.tensors())


def test_done_is_terminated_or_truncated() -> None:
    batch = _batch(time=2, envs=3)  # rew = 0, 1, 2, 10, 11, 12
    assert batch.terminated.tolist() == [[True, False, False], [False, False, True]]
    assert batch.truncated.tolist() == [[True, False, False], [True, False, False]]
    assert batch.done.tolist() == [[True, False, False], [True, False, True]]


def test_len_and_shape_follow_rew() -> None:
    batch = _batch(time=4, envs=5)
    assert len(batch) == 4
    assert batch.shape == (4, 5)
    assert batch.obs_batch_size() == 4
