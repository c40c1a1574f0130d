"""data/io.py's writers: a file is replaced whole or not at all, with the user's umask, and a
failure names the file and its cause (a full disk even when torch's writer hides it)."""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from epochtrain.data import writes as data_writes
from epochtrain.data.writes import check_writable_dir, replace_file, replacing, write_durably
from epochtrain.errors import CheckpointError


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o007, 0o660)])
def test_a_replaced_file_has_the_mode_the_umask_gives_new_files(
    tmp_path: Path, umask: None, mask: int, mode: int
) -> None:
    os.umask(mask)
    replace_file(tmp_path / "a.json", b"{}\n")
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == mode
    replace_file(tmp_path / "a.json", lambda f: f.write(b"[]\n"))
    assert (tmp_path / "a.json").read_bytes() == b"[]\n"


def _half_then(exc: BaseException) -> Any:
    def write(f: BinaryIO) -> None:
        f.write(b"half a file")
        raise exc

    return write


@pytest.mark.parametrize(
    "exc", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()]
)
def test_a_failed_replacement_keeps_the_old_file_and_no_temporary(
    tmp_path: Path, exc: BaseException
) -> None:
    path = tmp_path / "result.json"
    path.write_bytes(b"old")
    with pytest.raises(type(exc)):
        replace_file(path, _half_then(exc))
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_with_what_the_failure_is_a_checkpoint_error_naming_the_file_and_the_fix(
    tmp_path: Path,
) -> None:
    path = tmp_path / "data.buf"
    broken = _half_then(OSError(errno.EFBIG, "File too large"))
    with pytest.raises(CheckpointError) as info:
        replace_file(path, broken, what="buffer file", fix="raise the limit")
    assert (
        str(info.value)
        == f"cannot write buffer file {str(path)!r}: File too large; raise the limit"
    )
    assert not list(tmp_path.iterdir())


TORCH_FULL = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1 vs 2")


@pytest.mark.parametrize(
    ("free", "cause"), [(4096, "No space left on device"), (1 << 30, "RuntimeError: [enforce")]
)
def test_torchs_full_disk_error_is_called_a_full_disk_when_the_disk_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free: int, cause: str
) -> None:
    real = os.statvfs(tmp_path)

    class Full:
        f_frsize = real.f_frsize
        f_bavail = free // real.f_frsize

    monkeypatch.setattr(data_writes.os, "statvfs", lambda _path: Full())
    for write in (
        lambda: replace_file(tmp_path / "b.pt", _half_then(TORCH_FULL), what="buffer file"),
        lambda: write_durably(tmp_path / "c.pt", _half_then(TORCH_FULL), what="checkpoint file"),
    ):
        with pytest.raises(CheckpointError, match=re.escape(f": {cause}")) as info:
            write()
        assert info.value.__cause__ is TORCH_FULL
    assert not list(tmp_path.iterdir())


def test_the_next_write_removes_what_a_killed_writer_on_this_host_left(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_pid = int(gone.stdout)
    host = socket.gethostname()
    killed = tmp_path / f".buf.pt.tmp-{host}-{dead_pid}-0a1b2c3d"
    live = tmp_path / f".buf.pt.tmp-{host}-{os.getpid()}-0a1b2c3d"  # a writer still at work
    elsewhere = tmp_path / f".buf.pt.tmp-another-host-{dead_pid}-0a1b2c3d"  # not ours to judge
    other_file = tmp_path / f".log.csv.tmp-{host}-{dead_pid}-0a1b2c3d"  # another path's
    for leftover in (killed, live, elsewhere, other_file):
        leftover.write_bytes(b"\0" * 1000)
    replace_file(tmp_path / "buf.pt", b"new")
    assert not killed.exists()
    assert live.exists() and elsewhere.exists() and other_file.exists()
    with replacing(tmp_path / "log.csv") as tmp:
        tmp.write_bytes(b"a,b\n")
    assert not other_file.exists() and (tmp_path / "log.csv").read_bytes() == b"a,b\n"


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        (b"", "it is not a file torch.save wrote"),
        (b"step,return\n1,2\n", "it is not a file torch.save wrote"),
        (None, "it is torn or corrupt (RuntimeError: PytorchStreamReader failed"),
    ],
    ids=["empty", "text", "torn"],
)
def test_an_unreadable_file_says_why_in_words(
    tmp_path: Path, content: bytes | None, cause: str
) -> None:
    import torch

    from epochtrain.data.io import safe_torch_load

    path = tmp_path / "data.buf"
    if content is None:  # the first half of a real torch file
        torch.save({"a": torch.zeros(100)}, path)
        content = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        safe_torch_load(path, "buffer file")
    assert str(info.value).startswith(f"buffer file {str(path)!r} cannot be read: {cause}")


def test_a_directory_to_write_in_is_checked_without_creating_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_writable_dir(tmp_path / "new" / "deeper", "logdir")  # creatable
    assert not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"logdir '.*file' is a file: choose a directory"):
        check_writable_dir(tmp_path / "file", "logdir")
    with pytest.raises(ValueError, match=r"is under '.*file', a file: choose a directory"):
        check_writable_dir(tmp_path / "file" / "x" / "y", "checkpoint_dir")
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as a read-only mount
    with pytest.raises(ValueError, match="is not writable by this user"):
        check_writable_dir(tmp_path / "new", "--out")


@pytest.mark.parametrize("existing", [False, True])
def test_a_directory_name_longer_than_a_file_system_takes_is_refused_naming_it(
    tmp_path: Path, existing: bool
) -> None:
    long = "y" * 300
    under = tmp_path / "x" if existing else tmp_path
    under.mkdir(exist_ok=True)
    with pytest.raises(ValueError, match=r"--logdir .*: the name 'y{40}'\.\.\. is 300 bytes"):
        check_writable_dir(under / long / "run", "--logdir")
    check_writable_dir(under / ("y" * 255), "--logdir")  # the longest name is fine


@pytest.mark.skipif(
    not os.access("/proc", os.W_OK | os.X_OK),
    reason="needs Linux's /proc and root, for whom os.access calls /proc writable (as in CI)",
)
def test_a_directory_that_access_calls_writable_but_takes_no_file_is_refused() -> None:
    with pytest.raises(ValueError, match=r"--out '/proc/runs': no file can be created in '/proc'"):
        check_writable_dir("/proc/runs", "--out")
