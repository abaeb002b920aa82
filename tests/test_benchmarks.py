"""The benchmarks' shared helpers and committed results: one folder per kind of machine, one run a folder, and every
ratio of a run the median of at least 3 repeats with its spread (runs from before repeats are named here)."""

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
from common import machine_key, repeated  # noqa: E402

# machine folders whose one run predates repeated ratios, with what would replace them
BEFORE_REPEATS = {"intel-xeon-avx512-bf16-fp16": "rerun benchmarks/run_all.sh on a Xeon with AVX512-FP16, no AMX"}
FOLDERS = sorted(p for p in RESULTS.iterdir() if p.is_dir())


def test_repeated_gives_the_median_and_the_spread():
    """Median, largest minus smallest, and the values, rounded."""
    assert repeated([1.0, 1.3, 0.9]) == {"median": 1.0, "spread": 0.4, "values": [1.0, 1.3, 0.9]}
    assert repeated([2.0, 4.0, 1.0, 3.0])["median"] == 2.5


def test_a_ratio_timed_fewer_than_three_times_is_refused():
    """Two timings give no median worth quoting: one line names the count."""
    with pytest.raises(ValueError, match="at least 3 repeats.*got 2"):
        repeated([1.0, 1.1])


def test_the_machine_key_names_a_folder():
    """This machine's key is a plain folder name: maker and family, then its widest instruction set if known."""
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+|[a-z0-9]+", machine_key())


def test_results_sit_in_one_folder_per_machine():
    """No result file outside a machine's folder, and each folder holds one dated run on one machine."""
    assert not list(RESULTS.glob("*.json"))
    assert FOLDERS
    for folder in FOLDERS:
        files = [json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("*.json")]
        assert files and len({(r["run"], r["machine"]) for r in files}) == 1, folder.name


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_every_ratio_is_repeated(folder):
    """Each file has `repeats` >= 3 and, per ratio, a median within its values and a spread; a folder from before
    repeats has none, so that its exemption is removed once it is rerun."""
    files = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("*.json")}
    if folder.name in BEFORE_REPEATS:
        assert not any("repeats" in r for r in files.values()), f"{folder.name} was rerun: drop its exemption"
        return
    for name, r in files.items():
        assert r.get("repeats", 0) >= 3, name
        for key, median in r.get("ratios", {}).items():
            values = r["ratio_values"][key]
            assert len(values) >= r["repeats"] and min(values) <= median <= max(values), (name, key)
            # both the spread and the values are rounded, to 2 or 3 places
            assert r["spreads"][key] == pytest.approx(max(values) - min(values), abs=0.011), (name, key)
