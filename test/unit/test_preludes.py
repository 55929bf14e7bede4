"""The kernel preludes in tinygrad/renderer/include/ are package data: every one a renderer reads exists and is read
by some renderer, and the wheel carries them (scikit-build-core copies every file of the package that neither
.gitignore nor pyproject's wheel.exclude leaves out)."""
import fnmatch
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "tinygrad" / "renderer" / "include"


def _read_names() -> set[str]:
    names = set()
    for path in (ROOT / "tinygrad" / "renderer").glob("*.py"):
        names |= set(re.findall(r"""read_prelude\(\s*["']([\w/.]+)["']\s*\)""", path.read_text()))
    return names


def _files() -> set[str]:
    return {p.relative_to(INCLUDE).as_posix() for p in INCLUDE.rglob("*") if p.is_file()}


def test_every_prelude_read_exists_and_every_file_is_read():
    names = _read_names()
    assert names, "found no read_prelude calls"
    assert names == _files()


def test_the_wheel_carries_the_preludes():
    line = re.search(r"^wheel\.exclude\s*=\s*\[(.*)\]", (ROOT / "pyproject.toml").read_text(), re.M)
    exclude = re.findall(r'"([^"]+)"', line.group(1)) if line else []
    assert exclude, "pyproject.toml's wheel.exclude moved: read it from where it is now"
    for name in _files():
        rel = f"tinygrad/renderer/include/{name}"
        assert not [pat for pat in exclude if fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(name, pat)], rel
    ignored = subprocess.run(["git", "check-ignore", *(f"tinygrad/renderer/include/{n}" for n in sorted(_files()))],
                             cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert ignored == [], f"git-ignored preludes do not ship: {ignored}"
