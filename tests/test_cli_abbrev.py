"""No parser of the ``epochtrain`` command takes an abbreviated option (``--see`` for
``--seed``): each refuses it before any work with the "did you mean" of a misspelt flag,
so that a command keeps its meaning when a later version adds an option."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from epochtrain.cli import _build_parser, main


@pytest.mark.parametrize(
    ("argv", "typed", "meant"),
    [
        (["config", "--algo", "ppo", "--see", "3"], "--see 3", "'--seed'"),
        (["config", "--algo", "ppo", "--no-verbos"], "--no-verbos", "'--no-verbose'"),
        (["config", "--alg", "ppo"], "--alg ppo", "'--algo'"),
        (["train", "--algo", "ppo", "--no-progres"], "--no-progres", "'--no-progress'"),
        (["sweep", "--algo", "ppo", "--out", "OUT", "--seed", "1"], "--seed 1", "'--seeds'"),
        (["compare", "OUT", "--rep", "100"], "--rep 100", "'--reps'"),
        (["eval", "OUT", "--episode", "3"], "--episode 3", "'--episodes'"),
    ],
)
def test_an_abbreviated_option_is_refused_with_the_option_it_may_mean(
    argv: list[str],
    typed: str,
    meant: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """argparse took each as the option it starts: ``sweep --seed 1`` ran seed 1 (its
    option is ``--seeds``), ``--no-verbos`` turned the epoch lines off."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main([str(out) if word == "OUT" else word for word in argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"unrecognized arguments: {typed} (did you mean {meant}" in err
    assert not out.exists()


def test_every_parser_of_the_command_refuses_abbreviations_and_takes_options_in_full(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``allow_abbrev=False`` on the top parser does not reach the subcommands' parsers."""
    parser, commands = _build_parser()
    assert set(commands) >= {"train", "config", "sweep", "compare", "eval", "collect"}
    for each in (parser, *commands.values()):
        assert isinstance(each, argparse.ArgumentParser) and each.allow_abbrev is False
    assert main(["config", "--algo=ppo", "--seed=3", "--max-epoch", "2", "--no-verbose"]) == 0
    out = capsys.readouterr().out
    assert "seed = 3" in out and "max_epoch = 2" in out and "verbose = false" in out
