"""safe_torch_load on a file torch.save did not write (a Minari HDF5 file, an .npz, a
plain pickle, JSON) says so from its first bytes: no advice to unpickle it, no torch
warning; a real torch file holding a pickled object keeps the weights_only advice."""

from __future__ import annotations

import fractions
import json
import pickle
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from epochtrain.data.io import safe_torch_load
from epochtrain.errors import CheckpointError


def hdf5(path: Path) -> None:
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(504))  # the signature HDF5 files open with


def npz(path: Path) -> None:
    with path.open("wb") as f:
        np.savez(f, obs=np.zeros((3, 4)))


def plain_pickle(path: Path) -> None:
    path.write_bytes(pickle.dumps({"obs": np.zeros(3)}, protocol=4))


def json_text(path: Path) -> None:
    path.write_text(json.dumps({"obs": [1, 2]}))


@pytest.mark.parametrize(
    ("write", "kind"),
    [
        (hdf5, r"an HDF5 file, .*--dataset minari:<dataset id>"),
        (npz, r"a zip archive without torch's data\.pkl, such as numpy's \.npz"),
        (plain_pickle, r"a plain pickle"),
        (json_text, r"JSON text"),
    ],
    ids=["hdf5", "npz", "pickle", "json"],
)
def test_a_file_torch_save_did_not_write_is_called_so_without_unpickling_advice(
    tmp_path: Path, write: Callable[[Path], None], kind: str
) -> None:
    path = tmp_path / "main_data.hdf5"
    write(path)
    with warnings.catch_warnings(), pytest.raises(CheckpointError) as info:
        warnings.simplefilter("error")  # torch's "Detected pickle protocol 4" leaks no more
        safe_torch_load(path, "buffer file")
    message = str(info.value)
    prefix = f"buffer file {str(path)!r} cannot be read: it is not a file torch.save wrote ("
    assert message.startswith(prefix)
    assert re.search(kind, message), message
    assert "weights_only" not in message and "may run code" not in message


def test_a_torch_file_holding_a_pickled_object_keeps_the_weights_only_advice(
    tmp_path: Path,
) -> None:
    path = tmp_path / "data.buf"
    torch.save({"ratio": fractions.Fraction(1, 3)}, path)
    with pytest.raises(CheckpointError, match=r"is refused: .*torch\.load\(\.\.\., weights_only"):
        safe_torch_load(path, "buffer file")
