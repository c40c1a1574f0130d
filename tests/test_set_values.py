"""``--set NAME=VALUE`` reads VALUE for the setting's type, and its errors and those of a
flag name what was typed (``--set seed=-1``, ``--update-per-step``)."""

from __future__ import annotations

import tomllib
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
