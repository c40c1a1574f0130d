"""The python blocks of docs/integrations.md run as written (in order, one namespace, in a
temporary working directory, offline); skipped when an extra they use is missing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "integrations.md"


def test_integrations_doc_python_blocks_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for module in ("wandb", "mlflow", "imageio_ffmpeg", "pygame", "minari", "h5py", "envpool"):
        pytest.importorskip(module, reason=f"{module} (an optional extra) is not installed")
    monkeypatch.chdir(tmp_path)
    for name in ("WANDB_SILENT", "MINARI_DATASETS_PATH", "SDL_VIDEODRIVER"):
        monkeypatch.setenv(name, "")  # the page sets these; restored after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv("WANDB_MODE", "offline")  # never reach the network, whatever it says
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 6
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    out = capsys.readouterr().out
    assert "continued to epoch 3" in out and "test returns by env step" in out
    assert (tmp_path / "videos" / "epoch_0002.mp4").stat().st_size > 0
