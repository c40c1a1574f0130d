"""The files around checkpoints: the one-writer lock, and leftovers of interrupted saves.

Names in a checkpoint's parent directory (``<name>`` is the checkpoint's, ``<pid>`` the
writing process's)::

    <name>/                  a complete checkpoint (it holds manifest.json)
    .tmp-<name>-<pid>/       a checkpoint being written; complete once its manifest is there
    .old-<name>-<pid>/       the checkpoint being replaced, moved aside during the swap
    .trash-<name>-<pid>/     a rotated-out checkpoint, moved out of ``epoch_*`` then deleted
    damaged-<name>/          a damaged checkpoint set aside by a save, never deleted
    .lock                    JSON {pid, host, token, created}: the directory's writer
    .tmp-.lock-<token>-<pid> the record of a process creating ``.lock``: hard-linked to it,
                             then deleted (:meth:`CheckpointLock.acquire`)
    .lock.stale-<host>-<pid> a dead writer's lock moved aside by a takeover of an earlier
                             version (then deleted; still older ones: ``.lock.stale-<pid>``)

A process killed at any moment leaves at most these leftovers; :func:`recover` puts a
complete checkpoint back in place when a swap was cut between its two renames, and
:func:`clean_leftovers` removes the rest (of dead writers only, or all of them when the
caller holds the lock). Neither ever removes the only complete copy of a checkpoint.
:func:`sweep` does both, and :meth:`CheckpointLock.acquire` sweeps the leftovers of dead
writers as soon as it holds the lock, so a killed save's or rotation's leftovers go at
the next load or resume, even of a finished run that saves nothing more.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import gc
import json
import os
import shutil
import socket
import uuid
import warnings
from pathlib import Path
from typing import Any

try:
    import fcntl

    HAVE_FLOCK = True
except ImportError:  # not POSIX: stale locks are taken over without flock (best effort)
    HAVE_FLOCK = False

from epochtrain.data.writes import deferred_signals, pid_alive
from epochtrain.errors import CheckpointError

__all__ = [
    "LOCK_FILE",
    "CheckpointLock",
    "clean_leftovers",
    "deferred_signals",
    "is_complete",
    "leftover_name",
    "recover",
    "remove_dir",
    "set_aside_damaged",
    "sweep",
]

LOCK_FILE = ".lock"
"""Name of the writer lock in a ``checkpoint_dir``."""

MANIFEST = "manifest.json"
TMP, OLD, TRASH = ".tmp-", ".old-", ".trash-"
LEFTOVER_PREFIXES = (TMP, OLD, TRASH)
STALE_LOCK = f"{LOCK_FILE}.stale-"
"""Prefix of a dead writer's lock moved aside by an earlier version's takeover:
``<prefix><host>-<pid>``; today's takeover deletes the lock in place, under ``flock``."""


_NO_LINK = frozenset(
    getattr(errno, name)
    for name in ("EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS", "EXDEV", "EMLINK", "EINVAL")
    if hasattr(errno, name)
)
"""Errors of ``os.link`` on a filesystem without hard links: the lock is then created in place."""


def _parse(data: bytes) -> dict[str, Any]:
    """A lock file's record; ``{}`` if torn or foreign (then treated as stale)."""
    try:
        record = json.loads(data)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _read_fd(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def leftover_name(prefix: str, name: str) -> str:
    """``<prefix><name>-<pid>`` for this process."""
    return f"{prefix}{name}-{os.getpid()}"


def _split(entry: str) -> tuple[str, str, int] | None:
    """``(prefix, checkpoint name, pid)`` of a leftover's name, or ``None``; a moved-aside
    lock's is ``(STALE_LOCK, "", pid)``, and ``None`` when another host's process moved it
    (its pid says nothing here)."""
    if entry.startswith(STALE_LOCK):
        host, _, pid = entry[len(STALE_LOCK) :].rpartition("-")
        same_host = host in ("", socket.gethostname())  # "": an older version's name
        return (STALE_LOCK, "", int(pid)) if same_host and pid.isdigit() else None
    for prefix in LEFTOVER_PREFIXES:
        if entry.startswith(prefix):
            name, _, pid = entry[len(prefix) :].rpartition("-")
            if name and pid.isdigit():
                return prefix, name, int(pid)
    return None


def _writer_gone(pid: int) -> bool:
    """True if the save that left a leftover of ``pid`` is over: the process is dead, or it
    is this one (its saves run one at a time and clean up or recover before starting)."""
    return pid == os.getpid() or not pid_alive(pid)


def is_complete(path: Path) -> bool:
    """True if ``path`` holds a manifest whose listed files all exist with their sizes.

    Cheap (stat calls, no hashing): tells a finished checkpoint from a half-written or
    half-deleted one. Loading still verifies every hash.
    """
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        return bool(files) and all(
            (path / name).stat().st_size == entry["bytes"] for name, entry in files.items()
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def remove_dir(path: Path) -> None:
    """Delete ``path`` after moving it out of its namespace (``.trash-*``), so a kill
    half-way leaves a leftover that is recognised, never a torn ``epoch_*`` directory."""
    if not path.exists():
        return
    if path.name.startswith(LEFTOVER_PREFIXES):  # already out of the namespace
        shutil.rmtree(path, ignore_errors=True)
        return
    trash = path.parent / leftover_name(TRASH, path.name)
    shutil.rmtree(trash, ignore_errors=True)  # of an earlier interrupted removal
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def recover(path: Path) -> Path | None:
    """Put a complete checkpoint back at ``path`` if a swap was cut between its renames.

    When ``path`` is missing, the newest complete ``.tmp-<name>-*`` of a dead writer (the
    new checkpoint) or else a complete ``.old-<name>-*`` (the one it replaced) is renamed
    to ``path``. Returns the directory moved into place, if any.
    """
    if path.exists() or not path.parent.is_dir():
        return None
    found: dict[str, list[Path]] = {TMP: [], OLD: []}
    for entry in path.parent.iterdir():
        parts = _split(entry.name)
        ours = parts is not None and parts[1] == path.name and parts[0] in found
        if parts and ours and _writer_gone(parts[2]) and is_complete(entry):
            found[parts[0]].append(entry)
    for prefix in (TMP, OLD):
        if found[prefix]:
            best = max(found[prefix], key=lambda p: (p / MANIFEST).stat().st_mtime)
            os.replace(best, path)
            return best
    return None


def clean_leftovers(root: Path, *, name: str | None = None, owned: bool = False) -> list[Path]:
    """Remove the leftovers in ``root`` (of checkpoint ``name`` only, if given).

    Only those of finished writers (dead processes, or this one), unless ``owned`` (the
    caller holds ``root``'s lock, so no
    other process writes there): then every leftover; and with ``name=None`` an ``epoch_*``
    directory that is not complete is set aside (:func:`set_aside_damaged`), never deleted:
    a save publishes only complete ones, so it was damaged after it was written.
    With ``name=None``, also the locks that an earlier version's takeover killed half-way
    left moved aside (``.lock.stale-*``) by a process of this host that has ended (even
    when ``owned``).
    Call :func:`recover` first. Returns what was removed.
    """
    if not root.is_dir():
        return []
    removed = []
    for entry in root.iterdir():
        parts = _split(entry.name)
        if parts is not None:
            kind, of, pid = parts
            mine = owned and kind != STALE_LOCK  # a live taker unlinks its own
            removable = (name is None or of == name) and (mine or _writer_gone(pid))
        elif entry.name.startswith(STALE_LOCK):
            removable = False  # another host's
        else:
            removable = False
            published = owned and name is None and entry.name.startswith("epoch_")
            if published and entry.is_dir() and not is_complete(entry):
                set_aside_damaged(entry)
        if removable:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


DAMAGED = "damaged-"
"""Prefix of a damaged ``epoch_*`` checkpoint set aside by a save in its directory."""


def set_aside_damaged(path: Path) -> Path | None:
    """Rename the damaged checkpoint ``path`` to ``damaged-<name>`` beside it, out of the
    ``epoch_*`` names that resumes read and rotation deletes, with a warning naming it;
    an empty directory holds nothing and is removed. Returns the new name, if any."""
    if not any(path.iterdir()):
        path.rmdir()
        return None
    aside = path.parent / f"{DAMAGED}{path.name}"
    n = 1
    while os.path.lexists(aside):
        n += 1
        aside = path.parent / f"{DAMAGED}{path.name}-{n}"
    os.replace(path, aside)
    warnings.warn(
        f"the checkpoint {os.fspath(path)!r} is damaged (a file it lists is missing or of "
        f"another size, or its manifest is): it was renamed to {aside.name!r}, not deleted, "
        "so that this run's saves neither replace nor rotate it out; delete it once you have "
        "looked at it",
        stacklevel=2,
    )
    return aside


def sweep(root: Path, *, owned: bool = False) -> list[Path]:
    """Put back every checkpoint of ``root`` whose swap was killed between its renames
    (:func:`recover`), then remove the leftovers (:func:`clean_leftovers`, ``owned`` as
    there). Returns what was removed."""
    if not root.is_dir():
        return []
    names = {
        parts[1] for e in root.iterdir() if (parts := _split(e.name)) and parts[0] in (TMP, OLD)
    }
    for name in sorted(names):
        recover(root / name)
    return clean_leftovers(root, owned=owned)


class CheckpointLock:
    """The writer lock of a ``checkpoint_dir``: ``<dir>/.lock`` holding pid, host and a token.

    :meth:`acquire` creates it atomically; a lock of a process that no longer runs on this
    host is stale and taken over. Any other holder (another process, or another trainer
    of this process) makes :meth:`acquire` raise :class:`CheckpointError` naming it. Once
    it holds the lock, :meth:`acquire` sweeps what dead writers left in ``root``
    (:func:`sweep`; a live process's files are never touched).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / LOCK_FILE
        self.token = uuid.uuid4().hex
        self.held = False
        self.swept = False
        """Whether the holder has cleaned every leftover in ``root`` (``sweep(owned=True)``,
        its first save) since it took the lock: while it holds it, only its own saves change
        the directory, so once is enough."""

    def _record(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "token": self.token,
            "created": datetime.datetime.now(datetime.UTC).isoformat(),
        }

    def _read(self) -> dict[str, Any] | None:
        try:
            return _parse(self.path.read_bytes())
        except FileNotFoundError:
            return None
        except OSError:
            return {}  # unreadable: treated as stale below

    def _create(self) -> bool:
        """Create the lock file with our record in one step: the record is written to a
        temporary file beside it (``.tmp-.lock-<token>-<pid>``, swept when its process is
        dead), which is then hard-linked to the lock's name, so no process ever sees the
        lock empty. Where hard links are not supported, the lock is created and then
        written, under ``flock`` against a concurrent takeover. A lock that exists already
        is refused before anything is written: a refused process leaves ``root`` untouched."""
        if os.path.lexists(self.path):
            return False
        data = json.dumps(self._record()).encode()
        tmp = self.root / leftover_name(TMP, f"{LOCK_FILE}-{self.token}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.link(tmp, self.path)
        except FileExistsError:
            return False
        except FileNotFoundError:  # the holder's sweep removed our temporary file
            return False
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
            return self._create_in_place(data)
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def _create_in_place(self, data: bytes) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            if HAVE_FLOCK:  # a taker that opened the empty file waits for the record
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, data)
        finally:
            os.close(fd)
        return True

    def _stale(self, record: dict[str, Any]) -> bool:
        pid, host = record.get("pid"), record.get("host")
        if not isinstance(pid, int) or not isinstance(host, str):
            return True
        return host == socket.gethostname() and not pid_alive(pid)

    def acquire(self) -> None:
        """Take the lock (idempotent); raise :class:`CheckpointError` if another writer has it."""
        if self.held:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        for attempt in range(5):
            if self._create():
                self.held, self.swept = True, False
                with contextlib.suppress(OSError):  # best effort: the first save sweeps again
                    sweep(self.root)
                return
            record = self._read()
            if record is None:
                continue  # released meanwhile: try again
            if self._stale(record):
                self._take_over()
                continue
            if record.get("pid") == os.getpid() and attempt == 0:
                gc.collect()  # a dropped trainer of this process may still hold it
                continue
            raise CheckpointError(self._in_use(record))
        record = self._read() or {}
        raise CheckpointError(self._in_use(record))

    def remove_if_stale(self) -> None:
        """Delete the lock file if its process no longer runs on this host (as a taker
        would, under ``flock``), without taking the lock: for a directory nobody will write
        again (a finished run's), whose dead writer's lock no taker would ever remove."""
        record = self._read()
        if record is not None and self._stale(record):
            self._take_over()

    def _take_over(self) -> None:
        """Delete the lock file if it is (still) stale, deciding under ``flock`` on the file.

        Two processes that found the same stale lock both come here: the first deletes it
        and creates its own; the second then finds that the path names another file (or
        none) and deletes nothing. Without ``fcntl`` (not POSIX) it is best effort: two
        takers racing in the few instructions between the checks and the deletion can
        still both take the lock.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # released or taken over meanwhile
        try:
            if HAVE_FLOCK:
                fcntl.flock(fd, fcntl.LOCK_EX)
            now, held = os.stat(self.path), os.fstat(fd)
            if (now.st_ino, now.st_dev) != (held.st_ino, held.st_dev):
                return  # replaced meanwhile: look again
            if self._stale(_parse(_read_fd(fd))):
                os.unlink(self.path)
        except FileNotFoundError:
            return
        finally:
            os.close(fd)  # releases the flock

    def _in_use(self, record: dict[str, Any]) -> str:
        pid, host, since = record.get("pid"), record.get("host"), record.get("created")
        if pid == os.getpid() and host == socket.gethostname():
            who = f"another trainer of this process (pid {pid})"
        else:
            who = f"process {pid} on host {host!r}"
        return (
            f"checkpoint_dir {os.fspath(self.root)!r} is in use by {who} since {since} (lock "
            f"file {os.fspath(self.path)!r}): two runs writing one directory would interleave "
            "their checkpoints. Give this run its own checkpoint_dir; if that writer has "
            "ended without releasing the lock (its host crashed), delete the lock file"
        )

    def release(self) -> None:
        """Remove the lock file if it is still ours."""
        if not self.held:
            return
        self.held = False
        record = self._read()
        if record and record.get("token") == self.token:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
