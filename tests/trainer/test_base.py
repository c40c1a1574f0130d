"""Iterator semantics, determinism and stats of the trainers (BaseTrainer contract)."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epochtrain.errors import CheckpointError
from epochtrain.logger import JSONLLogger, LazyLogger, MultiLogger
from epochtrain.stats import EpochStats
from tests.trainer.tiny import build


def comparable(stats: EpochStats[Any]) -> Any:
    """EpochStats as plain data without wall-clock fields (times and speeds)."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: clean(v)
                for k, v in value.items()
                if not (k.endswith("_time") or k.endswith("_speed"))
            }
        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, float) and math.isnan(value):
            return "nan"
        return value

    return clean(dataclasses.asdict(stats))


@pytest.mark.parametrize("kind", ["on", "off", "offline"])
def test_for_loop_yields_exactly_max_epoch_stats(kind: str) -> None:
    trainer = build(kind, max_epoch=3)
    epochs = [s.epoch for s in trainer]
    assert epochs == [1, 2, 3]
    assert trainer.stop_reason == "max_epoch"
    for _ in range(2):
        with pytest.raises(StopIteration):
            next(trainer)
    assert list(trainer) == []


def test_iter_never_resets_and_start_is_lazy() -> None:
    trainer = build("off", max_epoch=4)
    assert trainer.state.epoch == 0 and trainer.state.env_step == 0  # building runs nothing
    assert iter(trainer) is trainer
    first = next(trainer)
    assert first.epoch == 1
    rest = [s.epoch for s in trainer]  # for-loop continues, no silent reset
    assert rest == [2, 3, 4]


def test_reset_starts_over_with_the_same_counters() -> None:
    trainer = build("off", max_epoch=2)
    first_run = [comparable(s)["info_stat"]["env_step"] for s in trainer]
    trainer.reset()
    assert trainer.state.epoch == 0 and trainer.stop_reason is None
    second_run = [comparable(s)["info_stat"]["env_step"] for s in trainer]
    assert first_run == second_run
    assert trainer.stop_reason == "max_epoch"


def read_jsonl(path: Path) -> list[tuple[str, int]]:
    return [(r["scope"], r["step"]) for r in map(json.loads, path.read_text().splitlines())]


@pytest.mark.parametrize("kind", ["on", "off", "offline"])
def test_reset_logs_the_new_run_into_the_logger_it_is_given(kind: str, tmp_path: Path) -> None:
    first_log = JSONLLogger(tmp_path / "first")
    trainer = build(kind, max_epoch=2, logger=MultiLogger(first_log))
    trainer.run()
    first = read_jsonl(first_log.path)
    assert first and first_log.has_records()
    with pytest.raises(ValueError, match=r"reset\(logger="):
        trainer.reset()  # the new run's records would be dropped as already written
    assert trainer.state.epoch == 2  # refused before anything was reset
    second_log = JSONLLogger(tmp_path / "second")
    trainer.reset(logger=second_log)
    assert first_log._file.closed  # the trainer's old logger is closed, its records kept
    trainer.run()
    assert read_jsonl(second_log.path) == first
    assert read_jsonl(first_log.path) == first
    trainer.reset(logger=LazyLogger())
    trainer.reset()  # a logger that records nothing holds nothing to lose


def test_reset_refuses_a_checkpoint_dir_holding_the_runs_checkpoints(tmp_path: Path) -> None:
    trainer = build("off", max_epoch=2, checkpoint_dir=tmp_path)
    trainer.run()
    saved = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(CheckpointError, match="another checkpoint_dir"):
        trainer.reset()
    trainer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == saved


def test_run_returns_final_info_stats() -> None:
    trainer = build("on", max_epoch=2)
    info = trainer.run()
    assert info.epoch == 2
    assert info.env_step == trainer.state.env_step >= 2 * 40
    assert info.gradient_step == trainer.state.gradient_step > 0


def test_stop_fn_stops_early_with_reason() -> None:
    trainer = build("off", max_epoch=10, stop_fn=lambda best: best > -1.0)
    stats = list(trainer)
    assert len(stats) == 1
    assert trainer.stop_reason == "stop_fn"
    with pytest.raises(StopIteration):
        next(trainer)


def test_test_before_train_can_stop_before_any_epoch() -> None:
    trainer = build("off", max_epoch=3, test_before_train=True, stop_fn=lambda best: True)
    assert list(trainer) == []
    assert trainer.stop_reason == "stop_fn"
    assert trainer.state.test_episode == 2


@pytest.mark.parametrize("kind", ["on", "off", "offline"])
def test_same_seed_gives_same_epoch_stats(kind: str) -> None:
    first = [comparable(s) for s in build(kind)]
    second = [comparable(s) for s in build(kind)]
    assert first == second


def test_zipped_trainers_match_their_solo_runs() -> None:
    solo_a = [comparable(s) for s in build("off", torch_seed=1, seed=1)]
    solo_b = [comparable(s) for s in build("on", torch_seed=2, seed=2)]
    a, b = build("off", torch_seed=1, seed=1), build("on", torch_seed=2, seed=2)
    zipped = [(comparable(x), comparable(y)) for x, y in zip(a, b, strict=True)]
    assert [x for x, _ in zipped] == solo_a
    assert [y for _, y in zipped] == solo_b
    assert solo_a != [x for x, _ in zipped][:0]  # non-empty


def test_different_seeds_give_different_runs() -> None:
    a = [comparable(s) for s in build("off", seed=1)]
    b = [comparable(s) for s in build("off", seed=2)]
    assert a != b


def test_train_collect_stat_summarises_every_collect_of_the_epoch() -> None:
    trainer = build("off", step_per_epoch=40, step_per_collect=10)
    stats = next(trainer)
    assert stats.train_collect_stat is not None
    assert stats.train_collect_stat.n_collected_steps == 40 == trainer.state.env_step
    assert stats.test_collect_stat is not None
    assert stats.test_collect_stat.n_collected_episodes == 2


def test_offpolicy_training_stat_covers_all_gradient_steps_of_the_epoch() -> None:
    losses = [1.0, 5.0, 3.0]
    trainer = build("off", step_per_epoch=40, step_per_collect=10, loss_values=losses)
    stats = next(trainer)
    ts = stats.training_stat
    assert ts is not None
    assert ts.n_gradient_steps == trainer.state.gradient_step == 20  # 0.5 per env step
    assert ts.loss is not None
    assert ts.loss.min == 1.0 and ts.loss.max == 5.0
    expected = [losses[i % 3] for i in range(20)]
    assert ts.loss.mean == pytest.approx(np.mean(expected))
    assert ts.loss.std == pytest.approx(np.std(expected))
    assert ts.loss_extra is not None and ts.loss_extra.max == 10.0


def test_smoothed_loss_ignores_non_finite_values() -> None:
    # on_nonfinite="skip" keeps training past a non-finite loss (the default raises)
    values = [1.0, float("nan"), 3.0, float("inf")]
    trainer = build("off", loss_values=values, on_nonfinite="skip")
    stats = next(trainer)
    assert stats.training_stat is not None
    assert stats.training_stat.smoothed_loss["loss"] == pytest.approx(2.0)
    assert stats.training_stat.smoothed_loss["loss/extra"] == pytest.approx(4.0)


def test_onpolicy_update_runs_repeat_passes_of_minibatches_and_clears_buffer() -> None:
    trainer = build("on", step_per_epoch=40, step_per_collect=20, batch_size=8)
    next(trainer)
    # 2 collects x 2 repeats x ceil(20 / 8) = 3 minibatches
    assert trainer.state.gradient_step == 2 * 2 * 3
    assert len(trainer.train_collector.buffer) == 0


def test_offline_epoch_counts_gradient_steps() -> None:
    trainer = build("offline", step_per_epoch=25)
    stats = next(trainer)
    assert trainer.state.gradient_step == 25
    assert stats.train_collect_stat is None
    assert stats.training_stat is not None and stats.training_stat.n_gradient_steps == 25


def test_callbacks_receive_epoch_and_env_step() -> None:
    train_calls: list[tuple[int, int]] = []
    test_calls: list[tuple[int, int]] = []
    saved: list[Any] = []
    trainer = build(
        "off",
        max_epoch=2,
        train_fn=lambda e, s: train_calls.append((e, s)),
        test_fn=lambda e, s: test_calls.append((e, s)),
        save_best_fn=saved.append,
    )
    trainer.run()
    assert train_calls[0] == (1, 0)
    assert [e for e, _ in train_calls] == [1] * 4 + [2] * 4
    assert test_calls == [(1, 40), (2, 80)]
    assert 1 <= len(saved) <= 2 and saved[0] is trainer.policy


def test_test_in_train_tests_when_training_returns_satisfy_stop_fn() -> None:
    trainer = build(
        "off", max_epoch=2, step_per_collect=200, test_in_train=True, stop_fn=lambda r: r > 0
    )
    stats = list(trainer)
    # training episodes have return > 0, so the first collect with an episode triggers a test
    # that satisfies stop_fn and ends the run inside epoch 1
    assert len(stats) == 1 and trainer.stop_reason == "stop_fn"
    assert trainer.state.gradient_step == 0


def test_test_collection_is_deterministic_and_training_explores() -> None:
    trainer = build("off", max_epoch=1)
    next(trainer)
    seen = trainer.policy.seen_deterministic
    assert True in seen and False in seen


def test_set_progress_receives_env_steps_before_each_collect() -> None:
    trainer = build("off", max_epoch=1, step_per_collect=10, warmup_steps=20)
    next(trainer)
    assert trainer.policy.progress == [0, 20, 30, 40, 50]


def test_show_progress_false_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    build("off", max_epoch=1, show_progress=False).run()
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_progress_bar_and_verbose_lines(capsys: pytest.CaptureFixture[str], terminal: None) -> None:
    build("off", max_epoch=2, show_progress=True, verbose=True).run()
    captured = capsys.readouterr()
    assert "Epoch #1" in captured.err
    lines = [ln for ln in captured.out.splitlines() if ln.startswith("Epoch #")]
    assert len(lines) == 2 and "test_return=" in lines[0]


def test_a_checkpoint_dir_that_cannot_be_made_is_refused_when_the_trainer_is_built(
    tmp_path: Any,
) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"checkpoint_dir '.*file/ckpt' is under '.*file', a file"):
        build("off", checkpoint_dir=str(tmp_path / "file" / "ckpt"))


def test_next_from_one_of_the_trainers_hooks_or_a_second_thread_is_refused() -> None:
    from epochtrain.trainer.hooks import TrainerHook

    class Reenters(TrainerHook):
        def __init__(self) -> None:
            self.refused: list[str] = []

        def register(self, trainer: Any) -> None:
            self.trainer = trainer
            trainer.register_op("epoch_end", self.epoch_end)

        def epoch_end(self, stats: Any) -> None:
            try:
                next(self.trainer)
            except RuntimeError as exc:
                self.refused.append(str(exc))

    hook = Reenters()
    trainer = build("off", max_epoch=2, hooks=[hook])
    stats = list(trainer)
    assert [s.epoch for s in stats] == [1, 2]  # no epoch run inside another
    assert len(hook.refused) == 2 and "next() is already running" in hook.refused[0]


def test_after_an_error_inside_an_epoch_the_trainer_neither_goes_on_nor_saves_half_of_it(
    tmp_path: Any,
) -> None:
    def fail_in_epoch_2(stats: Any) -> None:
        if stats.epoch == 2 and not loaded:
            raise RuntimeError("the hook broke")

    loaded: list[bool] = []
    trainer = build("off", max_epoch=3, checkpoint_dir=str(tmp_path / "ckpt"))
    trainer.register_op("epoch_end", fail_in_epoch_2)
    next(trainer)
    with pytest.raises(RuntimeError, match="the hook broke"):
        next(trainer)
    for attempt in (lambda: next(trainer), lambda: trainer.save_checkpoint(tmp_path / "x")):
        with pytest.raises(RuntimeError, match=r"refused: epoch 2 stopped part-way \(Runtime"):
            attempt()
    assert not (tmp_path / "x").exists()
    trainer.load_checkpoint(tmp_path / "ckpt")  # epoch 1's: whole again
    loaded.append(True)
    assert [s.epoch for s in trainer] == [2, 3]


def test_a_hook_state_no_resume_could_load_is_refused_at_save_naming_the_hook(
    tmp_path: Any,
) -> None:
    from collections import deque

    from epochtrain.errors import CheckpointError
    from epochtrain.trainer.hooks import TrainerHook

    class Remembers(TrainerHook):
        def __init__(self, state: Any) -> None:
            self.state = state

        def register(self, trainer: Any) -> None:
            pass

        def state_dict(self) -> dict[str, Any]:
            return {"seen": self.state}

    trainer = build("off", max_epoch=1, hooks=[Remembers(deque([1, 2]))])
    next(trainer)
    with pytest.raises(CheckpointError, match=r"hook .*Remembers's state_dict\(\) holds .*deque"):
        trainer.save_checkpoint(tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()
    fine = build("off", max_epoch=1, hooks=[Remembers([1, 2])])
    next(fine)
    fine.save_checkpoint(tmp_path / "ckpt")  # a list loads back


def test_total_time_counts_logging_and_checkpoint_saves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import epochtrain.trainer.epoch as base_module  # where the loop calls save_periodic

    real_save = base_module.save_periodic

    def slow_save(trainer: Any, root: Path) -> Any:
        time.sleep(0.5)
        return real_save(trainer, root)

    monkeypatch.setattr(base_module, "save_periodic", slow_save)
    trainer = build("off", max_epoch=2, checkpoint_dir=tmp_path)
    start = time.perf_counter()
    stats = list(trainer)
    wall = time.perf_counter() - start
    # epoch 1's save counts from epoch 2's record on, and after the run both saves do
    assert stats[1].info_stat.total_time - stats[0].info_stat.total_time >= 0.5
    assert wall - 0.2 <= trainer.state.total_time <= wall


def test_a_logger_failing_at_an_epochs_end_costs_neither_its_checkpoint_nor_other_loggers(
    tmp_path: Path,
) -> None:
    """Before, the error skipped the due checkpoint (the next epoch's was written, a gap),
    and a JSONL logger after the failing one in a MultiLogger lost the record too."""
    from epochtrain.checkpoint import find_checkpoints

    class ServiceDown(LazyLogger):
        def log_info_data(self, stats: Any, epoch: int) -> None:
            if epoch == 2:
                raise ConnectionError("service down")

    jsonl = JSONLLogger(tmp_path / "log.jsonl")
    trainer = build("off", max_epoch=3, checkpoint_dir=tmp_path / "ck",
                    logger=MultiLogger(ServiceDown(), jsonl))  # fmt: skip
    next(trainer)
    with pytest.raises(ConnectionError, match="service down") as raised:
        next(trainer)
    assert [p.name for p in find_checkpoints(tmp_path / "ck")][-1] == "epoch_000002"
    assert any("epoch_000002" in note for note in raised.value.__notes__)
    assert [step for scope, step in read_jsonl(jsonl.path) if scope == "info"] == [1, 2]


@pytest.mark.parametrize("kind", ["on", "off", "offline"])
def test_a_closed_trainer_refuses_another_epoch_and_an_ended_one_still_stops(kind: str) -> None:
    """After ``close()`` (the end of a ``with`` block) ``run()`` trained two more epochs on
    the closed envs; now it is refused, and an ended run's iterator still just ends."""
    with build(kind, max_epoch=3) as trainer:
        next(trainer)
    with pytest.raises(RuntimeError, match=r"next\(\) refused: this trainer was closed"):
        trainer.run()
    assert trainer.state.epoch == 1
    with build(kind, max_epoch=1) as ended:
        ended.run()
    assert list(ended) == []


def test_close_releases_the_checkpoint_dir_for_another_trainer(tmp_path: Path) -> None:
    first = build("off", max_epoch=2, checkpoint_dir=tmp_path)
    next(first)
    first.close()  # kept referenced, as a sweep keeps its results
    assert not (tmp_path / ".lock").exists()
    second = build("off", max_epoch=2)
    second.load_checkpoint(tmp_path)  # was: "in use by another trainer of this process"
    assert second.state.epoch == 1
    second.close()
    assert first.state.epoch == 1
