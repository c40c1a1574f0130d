"""Spec files that cannot be read as a spec: a directory, a file that cannot be read, text
that is not UTF-8, a BOM, a JSON key given twice; each named with the file and the fix,
by :meth:`RunSpec.from_file` and by ``epochtrain config``/``train`` (exit 2, no traceback)."""

from __future__ import annotations

import json
import pathlib
from pathlib import Path
from typing import Any

import pytest

from epochtrain import RunSpec
from epochtrain.cli import main

SPEC = 'algo = "ppo"\nenv_id = "CartPole-v1"\n\n[config]\nlr = 0.001\n'


def test_a_directory_is_named_as_one_not_as_missing(tmp_path: Path) -> None:
    """It said "spec file 'run.toml' does not exist"."""
    (tmp_path / "run.toml").mkdir()
    with pytest.raises(ValueError, match=r"run\.toml' is a directory, not a spec file"):
        RunSpec.from_file(tmp_path / "run.toml")


@pytest.fixture
def unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A spec file whose read fails with PermissionError (CI runs as root: chmod would not
    stop it, so the read is patched)."""
    path = tmp_path / "run.toml"
    path.write_text(SPEC)
    real = pathlib.Path.read_bytes

    def deny(self: Path) -> bytes:
        if self.name == "run.toml":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", deny)
    return path


def test_an_unreadable_file_is_a_value_error_naming_it_and_the_cause(unreadable: Path) -> None:
    with pytest.raises(ValueError, match=r"run\.toml' cannot be read: Permission denied") as info:
        RunSpec.from_file(unreadable)
    assert isinstance(info.value.__cause__, PermissionError)


@pytest.mark.parametrize("command", ["config", "train"])
def test_config_and_train_exit_2_for_an_unreadable_file(
    unreadable: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A PermissionError traceback escaped main."""
    extra = ["--logdir", str(unreadable.parent / "runs")] if command == "train" else []
    assert main([command, "--config", str(unreadable), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("epochtrain: error: spec file") and "Permission denied" in err
    assert len(err.strip().splitlines()) == 1
    assert not (unreadable.parent / "runs").exists()


@pytest.mark.parametrize(
    ("content", "where"),
    [
        (
            'algo = "ppo"\nenv_id = "CartPole-v1"\n[logging]\nlogdir = "caf\xe9"\n'.encode(
                "latin-1"
            ),
            "byte 59, line 4",
        ),
        (b"\x00\xae\x01\xff binary", "byte 1, line 1"),
    ],
)
def test_text_that_is_not_utf8_names_the_file_and_the_byte(
    tmp_path: Path, content: bytes, where: str
) -> None:
    """It said "'utf-8' codec can't decode byte 0xe9 in position 59", without the file."""
    path = tmp_path / "run.toml"
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        RunSpec.from_file(path)
    message = str(info.value)
    assert message.startswith(f"{path} is not UTF-8 text ({where})")
    assert message.endswith("save it as UTF-8")


@pytest.mark.parametrize("suffix", ["toml", "json"])
def test_a_file_starting_with_a_byte_order_mark_reads_as_without(
    tmp_path: Path, suffix: str
) -> None:
    """Notepad writes UTF-8 with a BOM: the TOML said "Invalid statement (at line 1,
    column 1)", the JSON "Unexpected UTF-8 BOM"."""
    spec = RunSpec.tuned("ppo", "CartPole-v1").with_overrides({"logging.logdir": "runs/caf\xe9"})
    text = spec.to_toml() if suffix == "toml" else spec.to_json()
    path = tmp_path / f"run.{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert RunSpec.from_file(path) == spec


def test_non_ascii_text_is_read_as_utf8_whatever_the_locale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file was read with the locale's encoding (cp1252 on Windows, ASCII under LANG=C):
    a hand-written spec naming ``runs/café`` in UTF-8 read as ``runs/cafÃ©``."""
    path = tmp_path / "run.toml"
    path.write_bytes((SPEC + '[logging]\nlogdir = "runs/caf\xe9"\n').encode("utf-8"))
    real = pathlib.Path.read_text

    def latin1(self: Path, encoding: str | None = None, errors: str | None = None) -> str:
        return real(self, encoding=encoding or "latin-1", errors=errors)

    monkeypatch.setattr(pathlib.Path, "read_text", latin1)  # as a non-UTF-8 locale reads
    assert RunSpec.from_file(path).logging.logdir == "runs/caf\xe9"


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ('{"algo": "ppo", "env_id": "CartPole-v1", "algo": "dqn"}', "algo"),
        ('{"algo": "ppo", "env_id": "CartPole-v1", "config": {"lr": 0.1, "lr": 0.2}}', "lr"),
    ],
)
def test_a_json_key_given_twice_is_refused_naming_it_and_the_file(
    tmp_path: Path, data: str, key: str
) -> None:
    """The last one was taken silently (here a DQN run from a file that says ppo first);
    TOML refuses a key given twice."""
    assert json.loads(data)  # plain JSON takes it
    path = tmp_path / "run.json"
    path.write_text(data)
    with pytest.raises(ValueError, match=rf"run\.json names '{key}' twice .*: keep one"):
        RunSpec.from_file(path)


def test_a_logger_named_twice_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``config`` passed it and ``train`` wrote the run directory, then stopped in epoch 1
    with an ExistingRecordsError traceback (two JSONL loggers on one file)."""
    twice = 'logging.loggers=["jsonl","jsonl"]'
    assert main(["config", "--algo", "ppo", "--set", twice]) == 2
    assert "logging.loggers lists 'jsonl' twice: list each logger once" in capsys.readouterr().err
    logdir = tmp_path / "runs"
    argv = ["train", "--algo", "ppo", "--set", twice, "--logdir", str(logdir), "--quiet"]
    assert main([*argv, "--no-progress", "--checkpoint-dir", "none"]) == 2
    assert "lists 'jsonl' twice" in capsys.readouterr().err
    assert not logdir.exists()
    with pytest.raises(ValueError, match=r"lists 'csv' twice: .* loggers = \[\"csv\", \"jsonl\"\]"):
        RunSpec.tuned("ppo", "CartPole-v1").with_overrides(
            {"logging.loggers": ["csv", "jsonl", "csv"]}
        )


def _spec_data(**logging: Any) -> dict[str, Any]:
    return {"algo": "ppo", "env_id": "CartPole-v1", "logging": logging}


def test_a_spec_file_naming_a_logger_twice_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_spec_data(logdir="runs", loggers=["csv", "csv"])))
    with pytest.raises(ValueError, match=r"run\.json: logging\.loggers lists 'csv' twice"):
        RunSpec.from_file(path)
