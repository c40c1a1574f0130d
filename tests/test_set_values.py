"""``--set NAME=VALUE`` reads VALUE for the setting's type, and its errors and those of a
flag name what was typed (``--set seed=-1``, ``--update-per-step``)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from epochtrain import RunSpec
from epochtrain.cli import main
from epochtrain.spec_files import parse_value


def _config(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    """``epochtrain config --algo ppo ARGV``: status, the spec printed (parsed), stderr."""
    status = main(["config", "--algo", "ppo", *argv])
    out, err = capsys.readouterr()
    return status, tomllib.loads(out) if status == 0 else {}, err


@pytest.mark.parametrize(
    ("setting", "text", "section", "expected"),
    [
        ("lr", ".001", "config", 0.001),  # Python's float forms, as the flags take them
        ("lr", "3.", "config", 3.0),
        ("stop_at", ".5", None, 0.5),
        ("logging.logdir", "2024-01-01", "logging", "2024-01-01"),  # TOML: a date
        ("logging.logdir", "123", "logging", "123"),  # TOML: an int
        ("logging.logdir", "true", "logging", "true"),
        ("normalize_advantage", "False", "config", False),  # Python's, as None is taken
        ("normalize_advantage", "True", "config", True),
    ],
)
def test_a_set_value_is_read_for_the_type_of_its_setting(
    capsys: pytest.CaptureFixture[str],
    setting: str,
    text: str,
    section: str | None,
    expected: object,
) -> None:
    """Each was refused: ``.001`` (not a TOML float) as the text '.001', ``2024-01-01`` as
    a datetime.date, ``False`` as the text 'False'."""
    status, spec, err = _config(capsys, "--set", f"{setting}={text}")
    assert status == 0, err
    table = spec if section is None else spec[section]
    assert table[setting.rpartition(".")[2]] == expected


def test_parse_value_without_a_type_reads_toml_as_before() -> None:
    assert parse_value("3e-4") == 3e-4 and parse_value("[64, 64]") == [64, 64]
    assert parse_value(".001") == ".001" and parse_value("none") is None
    assert parse_value("cuda:0", str) == "cuda:0" and parse_value('"none"', str | None) == "none"
    assert parse_value("1e3", int | None) == 1000.0  # refused by the setting, as before


def test_a_sweep_reads_set_values_for_the_type_the_setting_has_in_every_algorithm() -> None:
    """``sweep`` parses ``--set`` before knowing each run's algorithm."""
    from epochtrain.spec_args import parse_set_options, setting_type

    assert setting_type("lr") is float and setting_type("logging.logdir") == str | None
    assert setting_type("config") is None and setting_type("nope") is None
    parsed = parse_set_options(["lr=.001", "logging.logdir=2024-01-01", "seed=3"])
    assert parsed == {"lr": 0.001, "logging.logdir": "2024-01-01", "seed": 3}


@pytest.mark.parametrize(
    ("item", "words"),
    [
        (
            "seed=-1",
            "--set seed=-1: must be int (>= 0 and <= 4294967295), got -1: e.g. --set seed=0",
        ),
        ("normalize_advantage=yes", "write --set normalize_advantage=true or"),
        ("lr=true", "--set lr=true: must be float (> 0), got True: e.g. --set lr="),
        ('lr="0.1"', "got '0.1': write it without quotes, e.g. --set lr="),
        ("hidden=64", "--set hidden=64: must be a list of int (>= 1), got 64: e.g. --set hidden=["),
        ("batch_size=2.5", "--set batch_size=2.5: must be int or None (>= 1), got 2.5"),
        ("stop_at=nan", "--set stop_at=nan: must be finite, got nan: e.g. --set stop_at="),
    ],
)
def test_a_set_value_its_setting_cannot_hold_is_named_as_typed(
    capsys: pytest.CaptureFixture[str], item: str, words: str
) -> None:
    """``--set seed=-1`` was reported as "--seed must be ..."; the others named the class
    (``PPOConfig.lr``) and ended "set lr to float", not what to type."""
    status, _, err = _config(capsys, "--set", item)
    assert status == 2 and words in err, err
    assert "--seed" not in err and "--batch-size" not in err and "--stop-at" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_flag_of_another_kind_of_algorithm_names_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It said "unknown setting 'trainer.update_per_step' for algo 'ppo' (did you mean
    'episode_per_test' or 'step_per_epoch'?)": a name nobody typed, and a guess."""
    status, _, err = _config(capsys, "--update-per-step", "2")
    assert status == 2
    assert err.strip() == (
        "epochtrain: error: --update-per-step: 'update_per_step' is a trainer setting of "
        "'ddpg', 'dqn', 'sac', 'td3', not of 'ppo': drop --update-per-step"
    )


def test_a_setting_of_other_algorithms_gets_no_spelling_guess() -> None:
    ppo = RunSpec.tuned("ppo", "CartPole-v1")
    for name in ("update_per_step", "trainer.update_per_step"):
        with pytest.raises(ValueError, match="is a trainer setting of 'ddpg'") as info:
            ppo.with_overrides({name: 2})
        assert "did you mean" not in str(info.value)
    with pytest.raises(ValueError, match=r"did you mean 'lr'\?"):  # a misspelling still is
        ppo.with_overrides({"lrr": 2})
    sac = RunSpec.tuned("sac", "Pendulum-v1")  # the counterparts of a name are not spelling
    with pytest.raises(ValueError, match=r"did you mean 'actor_lr' or 'alpha_lr' or 'critic"):
        sac.with_overrides({"lr": 1e-3})


@pytest.mark.parametrize(
    ("item", "loggers"),
    [
        ("logging.loggers=jsonl", ["jsonl"]),
        ("loggers=csv", ["csv"]),
        ('logging.loggers="jsonl"', ["jsonl"]),
        ('logging.loggers=["jsonl", "csv"]', ["jsonl", "csv"]),
    ],
)
def test_a_list_of_names_takes_one_bare_name_as_a_list_of_one(
    capsys: pytest.CaptureFixture[str], item: str, loggers: list[str]
) -> None:
    """``--set logging.loggers=jsonl`` was refused: "must be a list of ..., got 'jsonl'"."""
    status, spec, err = _config(capsys, "--set", item)
    assert status == 0, err
    assert spec["logging"]["loggers"] == loggers


def test_a_sweep_reads_a_bare_name_of_a_list_of_names_as_a_list_of_one() -> None:
    from epochtrain.spec_args import parse_set_options

    assert parse_set_options(["logging.loggers=jsonl"]) == {"logging.loggers": ["jsonl"]}
    assert parse_set_options(["hidden=64"]) == {"hidden": 64}  # numbers: no list of one


@pytest.mark.parametrize(
    ("item", "words"),
    [
        (
            "logging.loggers=jsnl",
            "--set logging.loggers=jsnl: must be a list of one of 'tensorboard', 'jsonl', "
            "'csv', got ['jsnl'] (did you mean 'jsonl'?): e.g. --set logging.loggers=[",
        ),
        (
            "logging.loggers=jsonl,csv",
            'got [\'jsonl,csv\']: write a list: --set logging.loggers=["jsonl", "csv"]',
        ),
        ("logging.loggers=", "--set logging.loggers=: must be a list of one of 'tensorboard'"),
    ],
)
def test_a_name_a_list_of_names_cannot_hold_is_refused_naming_the_key_and_the_names(
    capsys: pytest.CaptureFixture[str], item: str, words: str
) -> None:
    status, _, err = _config(capsys, "--set", item)
    assert status == 2 and words in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["--set", "lr=1e-3", "--set", "lr=2e-3"],
            "--set lr=2e-3: config.lr is given twice (also by --set lr=1e-3): give each",
        ),
        (
            ["--set", "config.lr=1e-3", "--set", "lr=2e-3"],
            "--set lr=2e-3: config.lr is given twice (also by --set config.lr=1e-3)",
        ),
        (
            ["--seed", "1", "--set", "seed=2"],
            "--set seed=2: trainer.seed is given twice (also by --seed)",
        ),
        (
            ["--no-verbose", "--set", "trainer.verbose=true"],
            "trainer.verbose is given twice (also by --no-verbose)",
        ),
    ],
)
def test_a_setting_given_twice_in_one_command_is_refused_naming_both(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    """The last one won without a word (``--seed 1 --set seed=2`` ran seed 2)."""
    status, _, err = _config(capsys, *argv)
    assert status == 2 and words in err, err


def test_a_sweep_refuses_a_setting_given_twice_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "exp"
    sweep = ["sweep", "--algo", "ppo", "--out", str(out), "--no-progress"]
    assert main([*sweep, "--set", "lr=1e-3", "--set", "config.lr=2e-3"]) == 2
    assert "config.lr is given twice (also by --set lr=1e-3)" in capsys.readouterr().err
    assert main([*sweep, "--max-epoch", "1", "--set", "max_epoch=2"]) == 2
    assert "trainer.max_epoch is given twice (also by --max-epoch)" in capsys.readouterr().err
    assert not out.exists()


def test_a_name_nested_below_a_setting_is_refused_as_such(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It said "unknown setting 'trainer.max_epoch.x' ... (did you mean 'max_epoch'?)" and
    listed every trainer setting."""
    status, _, err = _config(capsys, "--set", "trainer.max_epoch.x=3")
    assert status == 2
    assert "a setting is named NAME or SECTION.NAME (one dot: trainer.max_epoch" in err


def test_a_long_value_is_not_repeated_in_full_by_its_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The line repeated all of it, twice (10,081 characters for a value of 5,000)."""
    status, _, err = _config(capsys, "--set", "lr=" + "9" * 5000 + "x")
    assert status == 2 and "(5001 characters): must be float" in err
    assert len(err) < 400, len(err)


def test_an_empty_value_is_not_told_to_drop_quotes(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = _config(capsys, "--set", "lr=")
    assert status == 2 and "--set lr=: must be float (> 0), got ''" in err
    assert "quotes" not in err


def test_unicode_text_is_kept_and_text_that_is_not_utf8_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bytes that are not UTF-8 (``$'a\\xff'``) were written to spec.toml as an escape
    TOML cannot read; ``train --logdir`` made the run directory, then stopped with a
    UnicodeEncodeError traceback in the TensorBoard writer."""
    status, spec, err = _config(capsys, "--set", "logging.logdir=ünï cødé ✓")
    assert status == 0 and spec["logging"]["logdir"] == "ünï cødé ✓", err
    status, _, err = _config(capsys, "--set", "logging.logdir=a\udcff")
    assert status == 2 and "--set logging.logdir=a\\xff is not UTF-8 text" in err
    status, _, err = _config(capsys, "--checkpoint-dir", "a\udcff")
    assert status == 2 and "--checkpoint-dir a\\xff is not UTF-8 text" in err
    logdir = tmp_path / "a\udcff"
    assert main(["train", "--algo", "ppo", "--logdir", str(logdir), "--no-progress"]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
