"""The on-disk cache: compiled kernels (and, later, the work before them) kept across processes in one sqlite file.

Where: `CACHEDB`, else `<user cache dir>/tinygrad/cache.db`. `CACHELEVEL=0` turns it off. Every table name carries
VERSION, so a format change starts fresh tables instead of misreading old rows. Concurrent processes share the file
safely (sqlite's WAL journal and a busy timeout). Each row stores a checksum of its value: a row that does not
match is dropped and recomputed, and a sqlite file sqlite cannot read is moved aside and rebuilt, never crashed on.
A path that is not a sqlite file (a directory, a user's document) is never touched: tinygrad warns once and runs
without the cache.

NOTE: what the cache holds is trusted: compiled binaries from it are run, and a row is data another process wrote.
So rows are plain bytes or JSON records (tinygrad/engine/records.py), never pickles, whose reading would run code
(VERSION 2 dropped the pickle rows of version 1: they are never read; VERSION 3 dropped the compiled kernels
that carried launch facts in a header, now the rendered ProgramSpec's). And a cache another user could have written
is refused like a file that is not a cache: one owned by another user (or its folder, its -wal or -shm file), a
group- or world-writable one, or one in a folder others can write without the sticky bit. New cache files and
folders are made private to their user.
"""
from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import sqlite3
import stat
import threading
import time
import warnings

from tinygrad.helpers import CACHELEVEL, cache_dir, getenv

VERSION = 3
_local = threading.local()
SQLITE_HEADER = b"SQLite format 3\0"
# paths found not to be sqlite files: warned about once, then left alone
_refused: set[str] = set()
# paths whose header was read and found a cache's (see _may_use), and the lock for reading one
_verified: set[str] = set()
_verify_lock = threading.Lock()
# paths whose content this process has checked (PRAGMA quick_check reads the whole file, ~0.1 s for a cache of
# 400 MB: too slow for every thread's connection, and a cold start opens one in each compile worker)
_checked: set[str] = set()


def cache_path() -> pathlib.Path:
    return pathlib.Path(getenv("CACHEDB") or (cache_dir() / "cache.db"))


def _connect() -> sqlite3.Connection | None:
    """This thread's connection to the cache file (reopened when CACHEDB changes), or None if it can't be used."""
    path = str(cache_path())
    conn = getattr(_local, "conn", None)
    if conn is not None and _local.path == path:
        return conn
    if not _may_use(path):
        return None
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        _create_private(path)
        conn = _open(path)
    except sqlite3.OperationalError:
        # busy (another process is creating or checkpointing the file): not damage, so nothing is rebuilt; the
        # cache is skipped for this call and tried again on the next
        return None
    except sqlite3.DatabaseError as e:
        conn = _rebuild(path) if _damaged(e) else None
    except OSError:
        return None
    _local.conn, _local.path = conn, path
    return conn


def _damaged(e: sqlite3.DatabaseError) -> bool:
    """Whether SQLite's error says the file itself is damaged (SQLITE_CORRUPT, SQLITE_NOTADB): only then is it moved
    aside and rebuilt. Anything else (busy, a closed connection, ...) only skips the cache for this call."""
    msg = str(e).lower()
    return "malformed" in msg or "not a database" in msg


def _fetch_one(conn: sqlite3.Connection, sql: str, args: tuple):
    """The first row of a query, its cursor closed at once (an open statement would hold a read transaction)."""
    cur = conn.execute(sql, args)
    try:
        return cur.fetchone()
    finally:
        cur.close()


def _retry_busy(fn, tries: int = 5):
    """`fn()`, called again (after a short sleep) while SQLite answers busy or locked at once: under heavy load, a
    WAL reader can meet a checkpoint or recovery that returns SQLITE_BUSY without waiting for the busy timeout."""
    for attempt in range(tries):
        try:
            return fn()
        except sqlite3.OperationalError as e:
            msg = str(e)
            if attempt == tries - 1 or not ("locked" in msg or "busy" in msg):
                raise
            time.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")


def _open(path: str) -> sqlite3.Connection:
    """A connection to the cache at `path` in WAL mode, its content checked on the process's first connection
    (damage found later shows as errors, see _damaged). A busy database (SQLITE_BUSY raised at once by a journal-mode
    change that another process's first write races) is retried for half a second."""
    for attempt in range(10):
        conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA journal_mode=WAL")
            if path not in _checked:
                _fetch_one(conn, "PRAGMA quick_check(1)", ())
                _checked.add(path)
            return conn
        except sqlite3.OperationalError:
            conn.close()
            if attempt == 9:
                raise
            time.sleep(0.05)
        except BaseException:
            conn.close()
            raise
    raise AssertionError("unreachable")


def _may_use(path: str) -> bool:
    """Whether `path` may hold the cache: missing, empty, or a sqlite file. Anything else belongs to someone else.

    NOTE: read once per path and process, before this process opens any connection to it. Closing a file releases
    every POSIX lock the process holds on it, SQLite's too: a plain open and close of the cache file while a
    connection is live made other processes take this one's locks for gone, delete the -wal and -shm files under it,
    and then see a "malformed" cache and move it aside."""
    if path in _refused:
        return False
    with _verify_lock:
        if path in _verified:
            return True
        why = _untrusted(path)
        if why is not None:
            _refuse(path, why)
            return False
        ok = _check_header(path)
        if ok:
            _verified.add(path)
        return ok


def _check_header(path: str) -> bool:
    for _ in range(20):
        try:
            with open(path, "rb") as f:
                head = f.read(len(SQLITE_HEADER))
        except FileNotFoundError:
            return True
        except OSError as e:  # a directory, no permission, ...
            head, why = None, e.strerror or type(e).__name__
            break
        why = "it is not a sqlite file"
        # NOTE: another process may be creating the cache right now: its header can be read half written (a
        # prefix of it, or zeros), so such a head is read again before the file is taken for someone else's
        if head in (SQLITE_HEADER, b"") or not (SQLITE_HEADER.startswith(head) or head.count(0) == len(head)):
            break
        time.sleep(0.05)
    if head is not None and (head == SQLITE_HEADER or head == b""):
        return True
    _refuse(path, why)
    return False


def _refuse(path: str, why: str) -> None:
    _refused.add(path)
    warnings.warn(f"tinygrad's disk cache can't use {path} ({why}): running without it; set CACHEDB to another "
                  "path, or CACHELEVEL=0", RuntimeWarning, stacklevel=5)


def _my_uid() -> int | None:
    """This process's user id, or None where the OS has none (Windows: no ownership check)."""
    return os.getuid() if hasattr(os, "getuid") else None


def _untrusted(path: str) -> str | None:
    """Why the cache at `path` may hold rows another user wrote (see the module docstring), or None if it can't."""
    uid = _my_uid()
    if uid is None:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    try:
        st = os.stat(folder)
    except OSError:
        st = None  # made by _connect, private
    if st is not None:
        if st.st_uid not in (uid, 0):
            return f"its folder {folder} belongs to another user (uid {st.st_uid})"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            return f"its folder {folder} is writable by other users"
    for f in (path, path + "-wal", path + "-shm"):
        try:
            st = os.lstat(f)
        except FileNotFoundError:
            continue
        except OSError as e:
            return f"{f}: {e.strerror or type(e).__name__}"
        if stat.S_ISLNK(st.st_mode):
            return f"{f} is a symbolic link"
        if st.st_uid != uid:
            return f"{f} belongs to another user (uid {st.st_uid})"
        if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{f} is writable by other users"
    return None


def _create_private(path: str) -> None:
    """Create the cache file, readable and writable by its user only, if it doesn't exist (SQLite gives its -wal
    and -shm files the main file's permissions). Runs before this process's first connection to it (see _may_use
    on why the file may not be opened and closed beside one)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass


def _rebuild(path: str) -> sqlite3.Connection | None:
    """Move an unreadable cache file aside and start an empty one, if the file is a sqlite file (else the cache is
    off for this path: see _may_use)."""
    if not _may_use(path):
        return None
    for suffix in ("", "-wal", "-shm"):
        try:
            os.replace(path + suffix, f"{path}{suffix}.corrupt-{os.getpid()}")
        except OSError:
            pass
    try:
        _create_private(path)
        conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn
    except (sqlite3.DatabaseError, OSError):
        return None


def _table(name: str) -> str:
    return f"{''.join(c if c.isalnum() else '_' for c in name)}_v{VERSION}"


def _digest(key: str | bytes) -> str:
    return hashlib.sha256(key if isinstance(key, bytes) else key.encode()).hexdigest()


def diskcache_get(table: str, key: str | bytes) -> bytes | None:
    """The value stored under `key`, or None (missing, disabled, or found damaged and dropped)."""
    if CACHELEVEL < 1:
        return None
    conn = _connect()
    if conn is None:
        return None
    try:
        row = _retry_busy(lambda: _fetch_one(conn, f"SELECT val, sum FROM {_table(table)} WHERE key = ?",
                                             (_digest(key),)))
    except sqlite3.OperationalError:
        return None  # no such table yet, or busy past the retries
    except sqlite3.DatabaseError as e:
        if _damaged(e):
            _local.conn = _rebuild(str(cache_path()))
        return None
    if row is None:
        return None
    val, checksum = row
    if _digest(val) != checksum:
        diskcache_delete(table, key)
        return None
    return bytes(val)


def diskcache_put(table: str, key: str | bytes, val: bytes) -> None:
    if CACHELEVEL < 1:
        return
    conn = _connect()
    if conn is None:
        return
    def write():
        conn.execute(f"CREATE TABLE IF NOT EXISTS {_table(table)} (key TEXT PRIMARY KEY, val BLOB, sum TEXT)")
        conn.execute(f"INSERT OR REPLACE INTO {_table(table)} VALUES (?, ?, ?)", (_digest(key), val, _digest(val)))
    try:
        _retry_busy(write)
    except sqlite3.OperationalError:
        pass  # busy past the timeout: a cache may drop a write, and a busy file is no damaged one
    except sqlite3.DatabaseError as e:
        if _damaged(e):
            _local.conn = _rebuild(str(cache_path()))


def diskcache_delete(table: str, key: str | bytes) -> None:
    conn = _connect()
    if conn is not None:
        try:
            conn.execute(f"DELETE FROM {_table(table)} WHERE key = ?", (_digest(key),))
        except sqlite3.DatabaseError:
            pass


@functools.lru_cache(None)
def code_version() -> str:
    """A digest naming this build of the package (each module file's path, size and modification time). Cached
    schedules and rendered kernels are keyed by it: they were made by this code, so a rebuild or an upgrade starts
    them afresh instead of serving what older code produced. (Compiled binaries are keyed by their source and need
    no such key.)"""
    root = pathlib.Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.suffix in (".py", ".pyx", ".pxd", ".so"):
            st = p.stat()
            h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]
