"""The on-disk cache: shared by concurrent processes, rebuilt (never crashed on) when damaged, off at CACHELEVEL=0."""
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from tinygrad import diskcache
from tinygrad.helpers import Context

WRITER = textwrap.dedent("""
    import sys
    from tinygrad.diskcache import diskcache_get, diskcache_put
    me = int(sys.argv[1])
    for i in range(200):
        diskcache_put("stress", f"shared{i % 10}", b"x" * (i % 50))
        diskcache_put("stress", f"own{me}_{i}", bytes([me]) * 64)
        got = diskcache_get("stress", f"shared{i % 10}")
        assert got is None or set(got) <= {ord("x")}, got
    for i in range(200):
        assert diskcache_get("stress", f"own{me}_{i}") == bytes([me]) * 64
    print("ok")
""")


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "cache.db"
    monkeypatch.setenv("CACHEDB", str(path))
    return path


def test_roundtrip_and_tables_are_versioned(db):
    diskcache.diskcache_put("t", "key", b"value")
    assert diskcache.diskcache_get("t", "key") == b"value"
    assert diskcache.diskcache_get("t", "other") is None
    tables = {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert f"t_v{diskcache.VERSION}" in tables


def test_four_concurrent_writers(db):
    env = {**os.environ, "CACHEDB": str(db)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(i)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "ok", err
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute(f"SELECT COUNT(*) FROM stress_v{diskcache.VERSION}").fetchone()[0] == 10 + 4 * 200


@pytest.mark.parametrize("damage", ["header_then_garbage", "truncated"])
def test_damaged_file_is_rebuilt(db, damage):
    diskcache.diskcache_put("t", "key", b"value" * 1000)
    diskcache._local.conn.close()
    diskcache._local.conn = None
    raw = db.read_bytes()
    damaged = raw[:100] + os.urandom(4096) if damage == "header_then_garbage" else raw[:len(raw) // 3]
    db.write_bytes(damaged)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(str(db) + suffix):
            os.remove(str(db) + suffix)
    # a fresh process must neither crash nor return wrong bytes
    code = ("from tinygrad.diskcache import diskcache_get, diskcache_put\n"
            "assert diskcache_get('t', 'key') in (None, b'value' * 1000)\n"
            "diskcache_put('t', 'key2', b'new')\n"
            "assert diskcache_get('t', 'key2') == b'new'\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "CACHEDB": str(db)}, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


NOT_OURS = textwrap.dedent("""
    import warnings
    from tinygrad import Tensor
    from tinygrad.diskcache import diskcache_get, diskcache_put
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        diskcache_put("t", "key", b"value")
        assert diskcache_get("t", "key") is None
        assert (Tensor([1.0, 2.0]) * 2).tolist() == [2.0, 4.0]
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1 and "running without it" in msgs[0], msgs
    print("ok")
""")


@pytest.mark.parametrize("kind", ["directory", "text", "random", "zip"])
def test_a_path_that_is_not_a_cache_is_never_touched(tmp_path, kind):
    path = tmp_path / "notes.db"
    if kind == "directory":
        path.mkdir()
        (path / "inside.txt").write_text("mine")
    else:
        path.write_bytes({"text": b"my thesis, chapter 1\n", "random": os.urandom(8192),
                          "zip": b"PK\x03\x04" + os.urandom(100)}[kind])
    before = sorted(p.name for p in tmp_path.rglob("*"))
    content = path.read_bytes() if path.is_file() else None
    out = subprocess.run([sys.executable, "-c", NOT_OURS], env={**os.environ, "CACHEDB": str(path)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before, "a file was created, moved or renamed"
    if content is not None:
        assert path.read_bytes() == content


def test_a_damaged_row_is_dropped(db):
    diskcache.diskcache_put("t", "key", b"value")
    conn = sqlite3.connect(db)
    conn.execute(f"UPDATE t_v{diskcache.VERSION} SET val = ?", (b"evil",))
    conn.commit()
    assert diskcache.diskcache_get("t", "key") is None
    assert conn.execute(f"SELECT COUNT(*) FROM t_v{diskcache.VERSION}").fetchone()[0] == 0


def test_cachelevel_0_disables(db):
    with Context(CACHELEVEL=0):
        diskcache.diskcache_put("t", "key", b"value")
        assert diskcache.diskcache_get("t", "key") is None
    assert diskcache.diskcache_get("t", "key") is None


def test_compiled_kernels_come_back_from_disk(db):
    src = "void tg_disk_test(float *a) { a[0] = 42.0f; }"
    code = ("from tinygrad.runtime.ops_clang import ClangCompiler; import sys; c = ClangCompiler();"
            "c.compile = (lambda s: sys.exit('compiled again')) if len(sys.argv) > 1 else c.compile;"
            f"print(len(c.compile_cached({src!r})))")
    env = {**os.environ, "CACHEDB": str(db)}
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    second = subprocess.run([sys.executable, "-c", code, "again"], env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == second.stdout and int(first.stdout) > 0


SECOND_PROCESS = textwrap.dedent("""
    import numpy as np
    import tinygrad.codegen.linearizer as L
    from tinygrad import Tensor, nn
    from tinygrad.engine import plan
    made = []
    class Counting(L.Linearizer):
        def __init__(self, *a, **k):
            made.append(1)
            super().__init__(*a, **k)
    L.Linearizer = Counting
    rng = np.random.default_rng(0)
    l1, l2 = nn.Linear(8, 16), nn.Linear(16, 3)
    x = Tensor(rng.standard_normal((4, 8), dtype=np.float32))
    y = Tensor(np.array([0, 1, 2, 1], np.int32))
    opt = nn.optim.SGD([l1.weight, l1.bias, l2.weight, l2.bias], lr=0.1)
    with Tensor.train():
        loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(len(made), plan.plan_stats()[2], round(loss.item(), 5))
""")


def test_second_process_skips_scheduling_and_codegen(db):
    env = {**os.environ, "CACHEDB": str(db)}
    runs = [subprocess.run([sys.executable, "-c", SECOND_PROCESS], env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr + runs[1].stderr
    (lin1, disk1, loss1), (lin2, disk2, loss2) = [r.stdout.split() for r in runs]
    assert int(lin1) > 0 and int(disk1) == 0
    # the second process linearized nothing and scheduled nothing it had scheduled before
    assert int(lin2) == 0 and int(disk2) > 0
    assert loss1 == loss2


def test_cachelevel_0_keeps_nothing(db):
    env = {**os.environ, "CACHEDB": str(db), "CACHELEVEL": "0"}
    r = subprocess.run([sys.executable, "-c", SECOND_PROCESS], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not db.exists() or not sqlite3.connect(db).execute("SELECT name FROM sqlite_master").fetchall()


def test_a_header_being_written_by_another_process_is_waited_for(tmp_path):
    import threading
    import time
    path = tmp_path / "cache.db"
    # another process has written half of the sqlite header so far (a race seen with parallel test workers)
    path.write_bytes(diskcache.SQLITE_HEADER[:5])

    def finish():
        time.sleep(0.2)
        sqlite3.connect(path).close()
        path.write_bytes(diskcache.SQLITE_HEADER + bytes(84))
    t = threading.Thread(target=finish)
    t.start()
    try:
        assert diskcache._may_use(str(path))
    finally:
        t.join()
    assert str(path) not in diskcache._refused


def test_busy_is_retried_and_never_taken_for_damage(db, monkeypatch):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise sqlite3.OperationalError("database is locked")
        return "value"
    assert diskcache._retry_busy(flaky) == "value" and len(calls) == 3
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        diskcache._retry_busy(lambda: (_ for _ in ()).throw(sqlite3.OperationalError("no such table: t")))
    # a cache file busy past every retry when it is opened: the call goes without the cache, nothing is moved aside
    diskcache.diskcache_put("t", "key", b"value")
    monkeypatch.setattr(diskcache._local, "conn", None, raising=False)

    def busy(path):
        raise sqlite3.OperationalError("database is locked")
    monkeypatch.setattr(diskcache, "_open", busy)
    assert diskcache.diskcache_get("t", "key") is None
    assert sorted(p.name for p in db.parent.iterdir() if "corrupt" in p.name) == []
    monkeypatch.undo()
    monkeypatch.setenv("CACHEDB", str(db))
    assert diskcache.diskcache_get("t", "key") == b"value"


def test_the_cache_file_is_never_opened_beside_a_live_connection(db, monkeypatch):
    """Closing any descriptor of a file drops every POSIX lock this process holds on it, SQLite's included: once a
    connection is open, no thread may read the file's header again (other processes then took the cache for
    abandoned, deleted its -wal and -shm, and moved it aside as malformed)."""
    import builtins
    import threading
    diskcache.diskcache_put("t", "key", b"value")  # this thread's connection is live
    real_open = builtins.open

    def guarded_open(file, *args, **kwargs):
        if str(file) == str(db):
            raise AssertionError("the cache file was opened beside a live connection")
        return real_open(file, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", guarded_open)
    got = []
    # a new thread makes a connection of its own (as the parallel compiles do)
    t = threading.Thread(target=lambda: got.append(diskcache.diskcache_get("t", "key")))
    t.start()
    t.join()
    assert got == [b"value"]


def test_the_file_is_checked_once_per_process_not_per_thread(db, monkeypatch):
    # PRAGMA quick_check reads the whole file: a cold start's compile workers each open a connection, and a check per
    # connection cost seconds on a big cache
    import threading
    checks = []
    real = diskcache._fetch_one

    def counted(conn, sql, args):
        if "quick_check" in sql:
            checks.append(sql)
        return real(conn, sql, args)
    monkeypatch.setattr(diskcache, "_fetch_one", counted)
    diskcache.diskcache_put("t", "key", b"value")
    got = []
    workers = [threading.Thread(target=lambda: got.append(diskcache.diskcache_get("t", "key"))) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert got == [b"value"] * 3
    assert len(checks) <= 1


def test_a_rendered_kernel_is_not_reused_when_the_device_options_change(db, monkeypatch):
    # the rendered-kernel cache is keyed by the device's code-generation options: a kernel rendered with vector exp2
    # (vector_math) is not served to the same device without it, as a TF32 kernel is not served once ALLOW_TF32 is
    # off (the CUDA device's tensor_cores differ); turning the option back on finds the first render again
    import dataclasses

    from tinygrad import Device, Tensor
    from tinygrad.engine.realize import _render
    from tinygrad.engine.schedule import create_schedule_with_vars
    t = Tensor.rand(64, 64, device="CLANG").realize()
    ast = create_schedule_with_vars([t.exp2().lazydata])[0][-1].ast
    dev = Device["CLANG"]
    with Context(CACHELEVEL=2):
        # the kernel's body (the last function: the prelude defines the vector exp2 for every float vector type)
        body = lambda src: src.split("void ")[-1]  # noqa: E731
        vector = _render("CLANG", ast).src
        assert "tg_exp2_float_v" in body(vector)
        with monkeypatch.context() as m:
            m.setattr(dev, "linearizer_opts", dataclasses.replace(dev.linearizer_opts, vector_math=False))
            per_lane = _render("CLANG", ast).src
        assert "tg_exp2_float_v" not in body(per_lane) and "__builtin_exp2f" in body(per_lane)
        assert _render("CLANG", ast).src == vector


# ---- what a cache row may hold: data, never code -------------------------------------------------------------------
EVIL = textwrap.dedent("""
    import os
    import pickle
    import sqlite3
    import sys

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {sys.argv[2]}",))
    conn = sqlite3.connect(sys.argv[1])
    evil = pickle.dumps(Evil())
    import hashlib
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
              if r[0].startswith(("schedule_", "program_", "beam_"))]
    for t in tables:
        conn.execute(f"UPDATE {t} SET val = ?, sum = ?", (evil, hashlib.sha256(evil).hexdigest()))
    conn.commit()
    print(len(tables))
""")

STEP = textwrap.dedent("""
    import numpy as np
    from tinygrad import Tensor
    from tinygrad.engine import plan
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    print(((x * 2 + 1).sum(axis=1)).tolist(), plan.plan_stats()[2])
""")


def test_a_cache_row_holding_a_pickle_runs_no_code(db, tmp_path):
    env = {**os.environ, "CACHEDB": str(db), "CACHELEVEL": "2"}
    first = subprocess.run([sys.executable, "-c", STEP], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    # every row of the engine's tables (schedules, rendered kernels) replaced by a pickle that would create a file
    # when unpickled; the row's checksum made to match (compiled binaries are raw bytes, run as they are: the
    # ownership checks below are what keeps another user's binaries out)
    marker = tmp_path / "pwned"
    evil = subprocess.run([sys.executable, "-c", EVIL, str(db), str(marker)], capture_output=True, text=True,
                          timeout=60)
    assert evil.returncode == 0 and int(evil.stdout) >= 2, evil.stderr
    second = subprocess.run([sys.executable, "-c", STEP], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert not marker.exists(), "a pickle from the cache was run"
    assert second.stdout.split("]")[0] == first.stdout.split("]")[0]  # computed again, and right


def test_old_pickle_tables_are_never_read(db):
    # version 1 kept pickles: its tables are left alone, and the reader looks only at this version's
    assert diskcache.VERSION >= 2
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE program_v1 (key TEXT PRIMARY KEY, val BLOB, sum TEXT)")
    conn.commit()
    diskcache.diskcache_put("program", "k", b"new")
    assert diskcache.diskcache_get("program", "k") == b"new"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert f"program_v{diskcache.VERSION}" in tables and "program_v1" in tables


def test_records_roundtrip_the_engine_values_and_refuse_anything_else():
    import pickle

    from tinygrad import Tensor
    from tinygrad.codegen.kernel import Opt, OptOps
    from tinygrad.engine import records
    from tinygrad.engine.schedule import create_schedule_with_vars
    from tinygrad.shape.symbolic import Variable
    a = Tensor.rand(8, 8, device="CLANG").realize()
    out = ((a.T @ a).relu().sum(axis=0) + a[0:1].pad(((0, 0), (1, 1)))[:, 1:9].reshape(8)).cast("float16")
    asts = [si.ast for si in create_schedule_with_vars([out.lazydata])[0]]
    items = [(ast, (0, -1), 1, (3,)) for ast in asts]
    assert records.loads(records.dumps(items)) == items
    v = Variable("n", 1, 64).bind(5)
    rendered = ["k", "src", [v * 4, 1, 1], None, [v], (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 1, 16))]
    back = records.loads(records.dumps(rendered))
    assert back == rendered and back[4][0]._val == 5
    for val in (float("inf"), float("nan"), -0.0, 2**70, "text", b"\x00\xff", True):
        got = records.loads(records.dumps([val]))[0]
        assert got == val or (val != val and got != got)
        assert type(got) is type(val)
    with pytest.raises(records.RecordError):
        records.dumps([object()])
    for bad in (pickle.dumps([1, 2]), b"{}", b'{"format": 1, "nodes": [], "value": ["e", "os", "system"]}',
                b'{"format": 1, "nodes": [], "value": ["op", 0]}', b'{"format": 1, "nodes": [[1, [5], null]]}',
                b'{"format": 1, "nodes": [], "value": ["v", ["t", "x"], ["t", 1], 0, null, true]}',
                b'{"format": 1, "nodes": [], "value": ["__import__", "os"]}', b"[" * 100000):
        with pytest.raises(records.RecordError):
            records.loads(bad)


# ---- a cache another user could have written is refused ------------------------------------------------------------
REFUSED = textwrap.dedent("""
    import os
    import warnings
    from tinygrad import diskcache
    from tinygrad.diskcache import diskcache_get, diskcache_put
    if os.environ.get("FAKE_OTHER_UID"):
        diskcache._my_uid = lambda: os.getuid() + 1  # the file and its folder now belong to "another user"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        diskcache_put("t", "key", b"value")
        assert diskcache_get("t", "key") is None
        assert diskcache_get("t", "key") is None
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1 and "running without it" in msgs[0], msgs
    print(msgs[0])
""")


@pytest.mark.parametrize("case", ["other_owner", "group_writable", "world_writable", "open_folder", "symlink"])
def test_a_cache_another_user_could_write_is_refused(tmp_path, case):
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o700)
    path = folder / "cache.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t_v2 (key TEXT PRIMARY KEY, val BLOB, sum TEXT)")
    conn.commit()
    conn.close()
    os.chmod(path, 0o600)
    env = {**os.environ, "CACHEDB": str(path)}
    if case == "other_owner":
        env["FAKE_OTHER_UID"] = "1"
    elif case == "group_writable":
        os.chmod(path, 0o660)
    elif case == "world_writable":
        os.chmod(path, 0o646)
    elif case == "open_folder":
        os.chmod(folder, 0o777)
    else:
        os.rename(path, folder / "real.db")
        os.symlink(folder / "real.db", path)
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    out = subprocess.run([sys.executable, "-c", REFUSED], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert {"other_owner": "another user", "group_writable": "writable by other users",
            "world_writable": "writable by other users", "open_folder": "writable by other users",
            "symlink": "symbolic link"}[case] in out.stdout
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before, "the cache was written"


def test_a_new_cache_is_private(tmp_path, monkeypatch):
    path = tmp_path / "new" / "cache.db"
    monkeypatch.setenv("CACHEDB", str(path))
    old = os.umask(0o002)
    try:
        diskcache.diskcache_put("t", "key", b"value")
    finally:
        os.umask(old)
    assert diskcache.diskcache_get("t", "key") == b"value"
    assert path.stat().st_mode & 0o077 == 0 and path.parent.stat().st_mode & 0o077 == 0
    for f in path.parent.iterdir():
        assert f.stat().st_mode & 0o022 == 0, f
    # a sticky shared folder (as /tmp) is fine when the file is the user's own
    assert diskcache._untrusted(str(path)) is None
