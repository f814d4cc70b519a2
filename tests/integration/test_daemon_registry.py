"""The registry holds no secret in the clear: <data-dir>/sandlot.db, its
-wal and -shm are 0600 in a 0700 data dir, a sandbox's env values are kept
only sealed (a 0600 key file) and only while a restart needs them (running
or paused), never logged, and a registry written by the version before (env
in clear) is rewritten at start-up.

Each test drives its own sandlotd, since they stop and restart it.
"""
import json
import os
import sqlite3
import stat
from pathlib import Path

from test_daemon_core import own_daemon  # noqa: F401

SMALL = {"memory": "64M", "disk": "32M", "pids": 32}
REGISTRY_FILES = ("sandlot.db", "sandlot.db-wal", "sandlot.db-shm")


def secret():
    return "hunter2-" + os.urandom(12).hex()


def registry_bytes(d):
    out = b""
    for name in REGISTRY_FILES:
        p = Path(d.data_dir) / name
        if p.exists():
            out += p.read_bytes()
    return out


def mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def create(d, **opts):
    r = d.post("/v1/sandboxes", json_body={**SMALL, **opts})
    assert r.status == 201, r
    return r.json()["id"]


def echo(d, sid, var):
    r = d.post(f"/v1/sandboxes/{sid}/exec", json_body={"command": f'printf %s "${var}"'})
    assert r.status == 200, r
    return r.json()["stdout"]


def test_registry_files_and_data_dir_are_private(own_daemon, tmp_path):
    d = own_daemon(data_dir=tmp_path / "data")
    # made by someone else with looser modes, as an operator might
    os.makedirs(d.data_dir, mode=0o755)
    os.chmod(d.data_dir, 0o755)
    d.start()
    sid = create(d, env={"A": "1"})
    assert d.delete(f"/v1/sandboxes/{sid}").status == 204
    assert mode(d.data_dir) == 0o700
    for name in REGISTRY_FILES:
        p = Path(d.data_dir) / name
        assert p.exists(), name
        assert mode(p) == 0o600, (name, oct(mode(p)))
    key = Path(d.data_dir) / "registry.key"
    assert key.exists() and mode(key) == 0o600
    assert d.stop() == 0
    assert "data_dir_mode" in d.logs()


def test_loose_registry_files_of_before_are_fixed(own_daemon, tmp_path):
    d = own_daemon(data_dir=tmp_path / "data")
    d.start()
    create(d)
    assert d.stop() == 0
    for name in REGISTRY_FILES:
        p = Path(d.data_dir) / name
        if p.exists():
            os.chmod(p, 0o644)
    os.chmod(d.data_dir, 0o755)
    d.start()
    create(d)
    assert mode(d.data_dir) == 0o700
    for name in REGISTRY_FILES:
        p = Path(d.data_dir) / name
        if p.exists():
            assert mode(p) == 0o600, (name, oct(mode(p)))
    assert d.stop() == 0


def test_env_values_are_kept_sealed_and_only_while_needed(own_daemon, tmp_path):
    d = own_daemon(data_dir=tmp_path / "data")
    d.start()
    paused_val, ended_val = secret(), secret()
    kept = create(d, env={"API_TOKEN": paused_val})
    gone = create(d, env={"API_TOKEN": ended_val})
    assert echo(d, kept, "API_TOKEN") == paused_val
    assert d.post(f"/v1/sandboxes/{kept}/pause").status == 200
    assert d.delete(f"/v1/sandboxes/{gone}").status == 204
    raw = registry_bytes(d)
    assert paused_val.encode() not in raw and ended_val.encode() not in raw
    assert b"API_TOKEN" not in raw  # not even the names
    # while it runs (or is paused) the API still shows it to its owner
    assert d.get(f"/v1/sandboxes/{kept}").json()["options"]["env"] == {"API_TOKEN": paused_val}
    assert d.stop() == 0
    raw = registry_bytes(d)
    assert paused_val.encode() not in raw and ended_val.encode() not in raw

    # A restart: the paused sandbox resumes with its env; the ended one's is gone.
    d.start()
    assert d.post(f"/v1/sandboxes/{kept}/resume").status == 200
    assert echo(d, kept, "API_TOKEN") == paused_val
    ended = d.get(f"/v1/sandboxes/{gone}").json()
    assert ended_val not in json.dumps(ended)
    assert d.stop() == 0
    raw = registry_bytes(d)
    assert paused_val.encode() not in raw and ended_val.encode() not in raw
    log = d.log_path.read_text(errors="replace")
    assert paused_val not in log and ended_val not in log


def test_sealed_env_needs_its_key(own_daemon, tmp_path):
    """Without the key file the registry's env cannot be read back: the
    paused sandbox resumes without it, and the daemon says why."""
    d = own_daemon(data_dir=tmp_path / "data")
    d.start()
    val = secret()
    sid = create(d, env={"API_TOKEN": val})
    assert d.post(f"/v1/sandboxes/{sid}/pause").status == 200
    assert d.stop() == 0
    (Path(d.data_dir) / "registry.key").unlink()
    d.start()
    assert "env_unreadable" in d.logs()
    assert d.post(f"/v1/sandboxes/{sid}/resume").status == 200
    assert echo(d, sid, "API_TOKEN") == ""
    assert d.stop() == 0


# The sandboxes table as the version before this one wrote it (user_version
# 2): options with env in clear, and no sealed column.
V2_COLUMNS = ("id, state, created_ms, ended_ms, expires_ms, ttl_seconds, idle_timeout_seconds, "
              "last_active_ms, end_reason, options, metadata, next_cursor, auto_resume, "
              "paused_retention_seconds, paused_ms, workspace_kept")
V2_TABLE = """CREATE TABLE sandboxes (
 id TEXT PRIMARY KEY, state TEXT NOT NULL, created_ms INTEGER NOT NULL,
 ended_ms INTEGER NOT NULL DEFAULT 0, expires_ms INTEGER NOT NULL DEFAULT 0,
 ttl_seconds INTEGER NOT NULL DEFAULT 0, idle_timeout_seconds INTEGER NOT NULL DEFAULT 0,
 last_active_ms INTEGER NOT NULL DEFAULT 0, end_reason TEXT,
 options TEXT NOT NULL DEFAULT '{}', metadata TEXT NOT NULL DEFAULT '{}',
 next_cursor INTEGER NOT NULL DEFAULT 1, auto_resume INTEGER NOT NULL DEFAULT 0,
 paused_retention_seconds INTEGER NOT NULL DEFAULT 0, paused_ms INTEGER NOT NULL DEFAULT 0,
 workspace_kept INTEGER NOT NULL DEFAULT 0)"""


def test_a_registry_with_env_in_clear_is_scrubbed_at_start(own_daemon, tmp_path):
    d = own_daemon(data_dir=tmp_path / "data")
    d.start()
    paused_val, ended_val = secret(), secret()
    kept = create(d)
    gone = create(d)
    assert d.post(f"/v1/sandboxes/{kept}/pause").status == 200
    assert d.delete(f"/v1/sandboxes/{gone}").status == 204
    assert d.stop() == 0
    # Rewrite it as the version before kept it.
    db = sqlite3.connect(Path(d.data_dir) / "sandlot.db")
    rows = db.execute(f"SELECT {V2_COLUMNS} FROM sandboxes").fetchall()
    db.executescript("DROP TABLE sandboxes;" + V2_TABLE + ";")
    for row in rows:
        row = list(row)
        opts = json.loads(row[9])
        opts["env"] = {"API_TOKEN": paused_val if row[0] == kept else ended_val}
        row[9] = json.dumps(opts)
        db.execute(f"INSERT INTO sandboxes ({V2_COLUMNS}) VALUES ({','.join('?' * 16)})", row)
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    assert paused_val.encode() in registry_bytes(d)

    d.start()
    raw = registry_bytes(d)
    assert paused_val.encode() not in raw and ended_val.encode() not in raw
    assert d.post(f"/v1/sandboxes/{kept}/resume").status == 200
    assert echo(d, kept, "API_TOKEN") == paused_val
    assert ended_val not in json.dumps(d.get(f"/v1/sandboxes/{gone}").json())
    assert d.stop() == 0
    raw = registry_bytes(d)
    assert paused_val.encode() not in raw and ended_val.encode() not in raw
