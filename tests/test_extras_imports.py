"""``import epochtrain`` (and its subpackages) imports no optional extra."""

from __future__ import annotations

import subprocess
import sys

OPTIONAL = ("wandb", "mlflow", "imageio", "imageio_ffmpeg", "pygame", "minari", "h5py", "envpool")


def test_importing_epochtrain_imports_no_optional_package() -> None:
    code = (
        "import sys, epochtrain, epochtrain.logger, epochtrain.trainer, epochtrain.data, "
        "epochtrain.envs\n"
        f"print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
