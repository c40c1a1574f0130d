"""benchmarks/variants.py: variants parsed as --set takes them, run interleaved per seed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_scripts import load_script


@pytest.fixture(scope="module")
def variants() -> ModuleType:
    return load_script("variants")


def test_a_variant_is_a_name_and_json_settings_and_seeds_take_ranges(variants: ModuleType) -> None:
    assert variants.parse_variant("wide:hidden=[128,128],lr=3e-4,algo_note=x") == (
        "wide",
        {"hidden": [128, 128], "lr": 3e-4, "algo_note": "x"},
    )
    with pytest.raises(argparse.ArgumentTypeError, match="preset"):
        variants.parse_variant("preset:lr=1")
    with pytest.raises(argparse.ArgumentTypeError, match="key=value"):
        variants.parse_variant("bad:lr")
    assert variants.parse_seeds(["0-2", "7"]) == [0, 1, 2, 7]


def test_the_preset_and_each_variant_run_per_seed_and_are_compared_with_the_preset(
    variants: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs.jsonl"
    argv = ["--algo", "ppo", "--threshold", "15", "--seeds", "0-1", "--out", str(out)]
    variants.main([*argv, "--variant", "short:step_per_epoch=256,max_epoch=4"])
    runs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["variant"], r["seed"]) for r in runs] == [
        ("preset", 0), ("short", 0), ("preset", 1), ("short", 1)
    ]  # fmt: skip
    assert all(r["reached"] and r["best_test_return"] >= 15 for r in runs)
    # the variant's epochs are 256 env steps: it stops at a multiple of 256
    assert all(r["env_steps"] % 256 == 0 for r in runs if r["variant"] == "short")
    table = capsys.readouterr().out
    assert "| short | 2/2 |" in table and "| preset | 2/2 |" in table
