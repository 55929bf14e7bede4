"""What the repository itself must keep: modules short enough to read in one sitting, and no paths of the machine
the project was developed on (a shipped default pointing there fails everywhere else)."""
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PKG = ROOT / "tinygrad"
MAX_LINES = 1000
# the development machine's root folder, spelled in two pieces so this file does not hold it
MACHINE_ROOT = "/" + "work/"


def test_no_module_is_over_the_line_limit():
    long = []
    for path in sorted(PKG.rglob("*")):
        if path.suffix not in (".py", ".pyx", ".pxd") or "build" in path.relative_to(ROOT).parts:
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert long == [], f"split these by concept (at most {MAX_LINES} lines a module): {long}"


def _tracked_files() -> list[pathlib.Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_no_tracked_file_names_the_development_machine():
    found = []
    for path in _tracked_files():
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue  # a binary fixture (the gzipped kernel corpus, images)
        lines = data.decode("utf-8", "replace").splitlines()
        found += [f"{path.relative_to(ROOT)}:{i}" for i, line in enumerate(lines, 1) if MACHINE_ROOT in line]
    assert found == [], f"machine paths in tracked files: {found}"
