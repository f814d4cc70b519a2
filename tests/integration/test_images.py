"""Built images: `sandlot image build/ls/inspect/rm`, sandboxes on them
(`sandlot run --image`, "image" in sandlotd's API), and what a bad or
interrupted build leaves behind (nothing).

Builds use debootstrap and apt against this machine's apt sources.  The
package cache and the bootstrapped base tree live in SANDLOT_CACHE_DIR,
/var/cache/sandlot by default, shared by every test run: the first run on
a fresh machine fills it (a minute or two), later ones reuse it (the
minimal image then builds in about 20 s).  Images themselves go to the
session's own data directory and are removed with it.

The module builds images/minimal.recipe once; the last test removes it.
"""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, SANDLOT, kill_group, wait_until
import hostscan

RECIPES = REPO / "images"
BUILD_TIMEOUT = 900


def image_cmd(sandlot, *args, timeout=BUILD_TIMEOUT):
    """Run `sandlot image ARGS` with the session's data dir."""
    p = subprocess.run([str(SANDLOT), "image", *map(str, args)], env=sandlot.env,
                       capture_output=True, text=True, timeout=timeout)
    return p


def build(sandlot, recipe, *extra, timeout=BUILD_TIMEOUT):
    return image_cmd(sandlot, "build", "-q", *extra, recipe, timeout=timeout)


def images_dir(sandlot):
    return sandlot.data_dir / "images"


def leftover_builds(sandlot):
    d = images_dir(sandlot)
    if not d.is_dir():
        return []
    return sorted(n for n in os.listdir(d) if n.startswith(".build-") or n.startswith(".rm-"))


def digests(sandlot):
    d = images_dir(sandlot)
    if not d.is_dir():
        return set()
    return {n for n in os.listdir(d) if len(n) == 64}


def mounts_under(path):
    path = str(path)
    return [ln for ln in open("/proc/self/mountinfo") if path in ln]


def host_apt_uris():
    out = subprocess.run(["apt-get", "indextargets", "--format", "$(TARGET_OF) $(REPO_URI) $(RELEASE)"],
                         capture_output=True, text=True, check=True).stdout
    return {ln.split()[1].rstrip("/") for ln in out.splitlines() if ln.startswith("deb ")}


@pytest.fixture(scope="module")
def minimal(session_dirs):
    from conftest import Sandlot
    s = Sandlot(session_dirs["data_dir"])
    t0 = time.monotonic()
    p = build(s, RECIPES / "minimal.recipe")
    assert p.returncode == 0, f"building minimal failed:\n{p.stderr[-4000:]}"
    digest = p.stdout.strip().splitlines()[-1]
    assert digest.startswith("sha256:") and len(digest) == 71, p.stdout
    print(f"minimal built in {time.monotonic() - t0:.1f}s")
    return {"name": "minimal", "digest": digest}


def manifest_of(sandlot, ref):
    p = image_cmd(sandlot, "inspect", ref)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


# ---------------------------------------------------------------------------
# the minimal image

def test_minimal_manifest_records_the_package_set(sandlot, minimal):
    m = manifest_of(sandlot, "minimal")
    assert m["digest"] == minimal["digest"]
    assert m["name"] == "minimal" and m["names"] == ["minimal"]
    assert m["suite"] == "bookworm" and m["variant"] == "minbase"
    pk = {p["name"]: p["version"] for p in m["packages"]}
    for want in ("bash", "coreutils", "python3", "ca-certificates", "apt", "dpkg"):
        assert want in pk and pk[want], f"{want} missing from the manifest: {sorted(pk)}"
    # Exact versions, as dpkg has them in the image.
    r = sandlot.run(["--image", "minimal", "--", "dpkg-query", "-W", "-f", "${Version}", "python3"])
    assert r.rc == 0, r
    assert r.stdout == pk["python3"]
    # The mirror is the machine's own apt source, not a built-in host.
    assert m["mirror"] in host_apt_uris()
    assert {s["uri"] for s in m["sources"]} <= host_apt_uris()
    assert m["packages_sha256"].startswith("sha256:")
    assert "packages python3" in m["recipe"]["text"]
    assert m["size_bytes"] > 50_000_000 and m["files"] > 1000
    # Stored under its digest, with the name pointing at it.
    d = images_dir(sandlot)
    assert (d / minimal["digest"][7:] / "rootfs" / "usr" / "bin" / "python3").exists()
    assert os.readlink(d / "names" / "minimal") == "../" + minimal["digest"][7:]
    # By digest prefix too.
    assert manifest_of(sandlot, minimal["digest"][:19])["digest"] == minimal["digest"]


def test_image_ls(sandlot, minimal):
    p = image_cmd(sandlot, "ls", "--json")
    assert p.returncode == 0, p.stderr
    imgs = json.loads(p.stdout)["images"]
    mine = [i for i in imgs if i["digest"] == minimal["digest"]]
    assert len(mine) == 1 and mine[0]["names"] == ["minimal"]
    assert mine[0]["in_use"] == 0 and mine[0]["size_bytes"] > 0
    p = image_cmd(sandlot, "ls")
    assert p.returncode == 0 and "minimal" in p.stdout and minimal["digest"][7:19] in p.stdout


def test_python3_runs_in_the_image(sandlot, minimal):
    r = sandlot.run(["--image", "minimal", "--", "sh", "-c",
                     "python3 -c 'import ssl, sqlite3, json; print(6 * 7)'; "
                     ". /etc/os-release; echo $VERSION_CODENAME; "
                     "test -e /usr/bin/gcc && echo host-gcc || echo no-gcc; id -un; pwd"])
    assert r.rc == 0, r
    # The image's root, not the host's: the host has gcc, the image has not.
    assert os.path.exists("/usr/bin/gcc")
    assert r.stdout.split() == ["42", "bookworm", "no-gcc", "user", "/home/user"]


def test_the_image_is_also_an_erofs_file(sandlot, minimal):
    """rootfs.erofs beside rootfs/: the same tree, for vm sandboxes."""
    rootfs = Path(manifest_of(sandlot, "minimal")["path"])
    erofs = rootfs.parent / "rootfs.erofs"
    assert erofs.is_file()
    assert subprocess.run(["fsck.erofs", str(erofs)], capture_output=True).returncode == 0
    dump = subprocess.run(["dump.erofs", "--path=/usr/bin/python3.11", str(erofs)],
                          capture_output=True, text=True)
    assert dump.returncode == 0, dump.stderr
    size = int(dump.stdout.split("Size:")[1].split()[0])
    assert size == (rootfs / "usr/bin/python3.11").stat().st_size


def test_python3_runs_in_a_vm_on_the_image(sandlot, minimal, tmp_path):
    """The image's erofs file as the root of the vm backend's guest (booted
    here with the test host of vmguest.py, under TCG)."""
    import vmguest
    if vmguest.missing():
        pytest.skip(vmguest.missing())
    erofs = Path(manifest_of(sandlot, "minimal")["path"]).parent / "rootfs.erofs"
    g = vmguest.boot(tmp_path, erofs, vmguest.make_work(tmp_path),
                     vmguest.seccomp_program(sandlot.data_dir))
    try:
        code, out, err = g.conn.run("sh", "-c", "python3 -c 'import ssl, json; print(6 * 7)'; "
                                    ". /etc/os-release; echo $VERSION_CODENAME; id -un; pwd; uname -r")
    finally:
        g.conn.close()
        g.stop()
    assert code == 0, (out, err)
    assert out.split() == ["42", "bookworm", "user", "/home/user",
                           (vmguest.VM_DIR / "kernel-release").read_text().strip()]


def test_image_files_cannot_be_modified_from_inside(sandlot, minimal):
    root = images_dir(sandlot) / minimal["digest"][7:] / "rootfs"
    before = {p: (root / p).stat().st_mtime_ns for p in ("usr/bin", "etc", "var/lib/dpkg", ".")}
    script = r"""
for d in /usr /usr/bin /etc /var /var/lib/dpkg /opt /; do
    mkdir "$d/sandlot-x" 2>&1
done
echo x >> /usr/bin/python3 2>&1
rm -f /usr/bin/python3 2>&1
echo x >> /etc/os-release 2>&1
python3 - <<'EOF'
import os
for d in ("/", "/usr", "/etc", "/var", "/opt"):
    print(d, "ro" if os.statvfs(d).f_flag & os.ST_RDONLY else "rw")
EOF
"""
    r = sandlot.sh(script, "--image", "minimal")
    out = r.stdout
    assert out.count("Read-only file system") >= 7, r
    assert "Permission denied" in out or "Read-only file system" in out
    for d in ("/", "/usr", "/etc", "/var", "/opt"):
        assert f"{d} ro" in out, r
    after = {p: (root / p).stat().st_mtime_ns for p in before}
    assert before == after
    assert not list(root.glob("**/sandlot-x"))
    assert (root / "usr/bin/python3").exists()


def test_two_sandboxes_on_one_image_do_not_see_each_others_writes(sandlot, minimal):
    a = sandlot.popen(["--image", "minimal", "--", "sh", "-c",
                       "echo A > /tmp/f; echo A > ~/f; echo ready; sleep 4; cat /tmp/f ~/f; "
                       "ls -A /tmp; ls -A ~"])
    try:
        line = a.stdout.readline()
        assert line == b"ready\n", line
        # Both are on the image now.
        p = image_cmd(sandlot, "ls", "--json")
        b = sandlot.run(["--image", "minimal", "--", "sh", "-c",
                         "test -e /tmp/f && echo SEEN-TMP; test -e ~/f && echo SEEN-HOME; "
                         "echo B > /tmp/f; echo B > ~/f; cat /tmp/f ~/f"])
        assert b.rc == 0, b
        assert b.stdout == "B\nB\n", b
        out, err = a.communicate(timeout=30)
        assert a.returncode == 0, err
        assert out.split() == [b"A", b"A", b"f", b"f"], out
    finally:
        kill_group(a)
        a.wait()
    in_use = [i["in_use"] for i in json.loads(p.stdout)["images"] if i["names"] == ["minimal"]]
    assert in_use == [1], p.stdout  # a, while b was being started


def test_no_per_sandbox_copy_and_fast_start(sandlot, minimal):
    d = images_dir(sandlot)
    size_before = sum(f.stat().st_size for f in d.rglob("*") if f.is_file() and not f.is_symlink())
    times = {}
    for image in ("host", "minimal"):
        runs = []
        for _ in range(5):
            r = sandlot.run(["--image", image, "--storage", "tmpfs", "--", "true"])
            assert r.rc == 0, r
            runs.append(r.elapsed)
        times[image] = min(runs)
    size_after = sum(f.stat().st_size for f in d.rglob("*") if f.is_file() and not f.is_symlink())
    assert size_after == size_before
    # The same order of start-up time (bench/startup.py measures it properly).
    assert times["minimal"] < times["host"] * 3 + 0.05, times


def test_unknown_image_is_refused(sandlot, minimal):
    r = sandlot.run(["--image", "no-such-image", "--", "true"])
    assert r.rc == 2, r  # checked with the other options
    assert 'unknown image "no-such-image"' in r.stderr
    r = sandlot.run(["--image", "Bad/Name", "--", "true"])
    assert r.rc in (2, 125) and "invalid image" in r.stderr, r


# ---------------------------------------------------------------------------
# recipe features: env, workdir, user, file, run

def test_recipe_env_workdir_user_file_run(sandlot, minimal, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "numbers.csv").write_text("a,b\n1,2\n")
    (tmp_path / "hello.sh").write_text("#!/bin/sh\necho hello from the image\n")
    (tmp_path / "hello.sh").chmod(0o755)
    recipe = tmp_path / "custom.recipe"
    recipe.write_text(
        "# a recipe using every directive but npm\n"
        "suite bookworm\nvariant minbase\n"
        "packages jq\n"
        "file data /srv/data\n"
        "file hello.sh /usr/local/bin/\n"
        "run echo built > /srv/marker && \\\n"
        "    chmod 644 /srv/marker\n"
        "env GREETING=hello world\n"
        "user agent\n"
        "workdir /srv/data\n")
    p = build(sandlot, recipe, "--name", "custom")
    try:
        assert p.returncode == 0, p.stderr[-4000:]
        r = sandlot.run(["--image", "custom", "--", "sh", "-c",
                         'echo "$GREETING"; pwd; id -un; echo $USER; cat numbers.csv; hello.sh; '
                         'cat /srv/marker; echo \'{"x": 5}\' | jq .x; stat -c %U /srv/data/numbers.csv'])
        assert r.rc == 0, r
        assert r.stdout.splitlines() == ["hello world", "/srv/data", "agent", "agent", "a,b",
                                         "1,2", "hello from the image", "built", "5", "root"], r
        m = manifest_of(sandlot, "custom")
        assert m["env"] == ["GREETING=hello world"] and m["workdir"] == "/srv/data"
        assert m["user"] == "agent"
        assert "jq" in {p["name"] for p in m["packages"]}
    finally:
        rm = image_cmd(sandlot, "rm", "custom")
    assert rm.returncode == 0, rm.stderr
    assert not leftover_builds(sandlot)


# ---------------------------------------------------------------------------
# bad recipes leave nothing behind

@pytest.mark.parametrize("text, line, reason", [
    ("suite bookworm\nfrobnicate yes\n", 2, 'unknown directive "frobnicate"'),
    ("suite bookworm\npackages Python3\n", 2, 'invalid Debian package name "Python3"'),
    ("# no suite\npackages python3\n", 0, 'no "suite" line'),
    ("suite bookworm\nvariant tiny\n", 2, 'unknown variant "tiny"'),
    ("suite bookworm\n\nfile missing.txt /x\n", 3, "missing.txt: No such file or directory"),
    ("suite bookworm\nenv 1X=2\n", 2, "env needs KEY=VALUE"),
    ("suite bookworm\nworkdir relative\n", 2, "workdir needs an absolute path"),
    ("suite bookworm\nsuite trixie\n", 2, '"suite" given twice'),
    ("suite bookworm\nnpm left-pad@1.3.0\n", 2, "npm packages need npm in the image"),
    ("suite bookworm\nrun\n", 2, '"run" needs an argument'),
])
def test_syntax_errors_name_file_and_line(sandlot, tmp_path, text, line, reason):
    recipe = tmp_path / "bad.recipe"
    recipe.write_text(text)
    before = digests(sandlot)
    p = build(sandlot, recipe, timeout=60)
    assert p.returncode == 1, p
    where = f"{recipe}:{line}:" if line else f"{recipe}:"
    assert where in p.stderr and reason in p.stderr, p.stderr
    assert digests(sandlot) == before and not leftover_builds(sandlot)


def test_unknown_suite_names_the_sources(sandlot, tmp_path):
    recipe = tmp_path / "far.recipe"
    recipe.write_text("suite nosuchsuite\n")
    p = build(sandlot, recipe, timeout=60)
    assert p.returncode == 1
    assert 'no apt source of this machine offers suite "nosuchsuite"' in p.stderr, p.stderr
    assert not leftover_builds(sandlot)


def test_unknown_package_names_it_and_its_line(sandlot, minimal, tmp_path):
    recipe = tmp_path / "pkg.recipe"
    recipe.write_text("suite bookworm\n# fine\npackages jq\n"
                      "packages sandlot-no-such-package-xyz\n")
    before = digests(sandlot)
    p = build(sandlot, recipe)
    assert p.returncode == 1, p.stderr[-3000:]
    assert f'{recipe}:4: unknown package "sandlot-no-such-package-xyz"' in p.stderr, p.stderr[-3000:]
    assert digests(sandlot) == before and not leftover_builds(sandlot)
    assert not mounts_under(images_dir(sandlot))


def test_failing_run_names_line_and_status(sandlot, minimal, tmp_path):
    recipe = tmp_path / "run.recipe"
    recipe.write_text("suite bookworm\nrun echo fine\nrun echo about to fail; exit 7\n")
    before = digests(sandlot)
    p = build(sandlot, recipe)
    assert p.returncode == 1, p.stderr[-3000:]
    assert f"{recipe}:3: command failed with exit status 7" in p.stderr, p.stderr[-3000:]
    assert "about to fail" in p.stderr  # its output is shown
    assert digests(sandlot) == before and not leftover_builds(sandlot)


# ---------------------------------------------------------------------------
# interrupted builds

def start_build(sandlot, recipe):
    return subprocess.Popen([str(SANDLOT), "image", "build", str(recipe)], env=sandlot.env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def wait_for_output(p, needle, timeout=300):
    """Read p's stderr until a line contains needle; returns what was read."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        seen.append(line.decode(errors="replace"))
        if needle in seen[-1]:
            return "".join(seen)
    raise AssertionError(f"never saw {needle!r}:\n{''.join(seen)[-3000:]}")


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_build_leaves_nothing(sandlot, minimal, tmp_path, sig, status):
    marker = f"sleep 3130{int(sig)}"  # a command line no one else runs
    recipe = tmp_path / "slow.recipe"
    recipe.write_text(f"suite bookworm\nrun {marker}\n")
    before = digests(sandlot)
    p = start_build(sandlot, recipe)
    try:
        wait_for_output(p, "line 2: run")
        assert wait_until(lambda: hostscan.find_pids_containing(marker), 10)
        assert leftover_builds(sandlot)  # the build directory exists while it works
        p.send_signal(sig)
        p.wait(timeout=60)
        assert p.returncode == status, p.stderr.read()
    finally:
        kill_group(p)
        p.wait()
    assert wait_until(lambda: not hostscan.find_pids_containing(marker), 10)
    assert not leftover_builds(sandlot)
    assert digests(sandlot) == before
    assert not mounts_under(images_dir(sandlot))


def test_killed_build_is_cleaned_up_by_the_next(sandlot, minimal, tmp_path):
    marker = "sleep 31399"
    recipe = tmp_path / "slow.recipe"
    recipe.write_text(f"suite bookworm\nrun {marker}\n")
    p = start_build(sandlot, recipe)
    try:
        wait_for_output(p, "line 2: run")
        assert wait_until(lambda: hostscan.find_pids_containing(marker), 10)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        kill_group(p)
        p.wait()
    # Everything in the build's namespaces dies with the builder...
    assert wait_until(lambda: not hostscan.find_pids_containing(marker), 10)
    assert not mounts_under(images_dir(sandlot))
    # ... only its directory stays, until the next build removes it.
    assert leftover_builds(sandlot)
    bad = tmp_path / "fail.recipe"
    bad.write_text("suite bookworm\nrun exit 3\n")
    q = build(sandlot, bad)
    assert q.returncode == 1 and "exit status 3" in q.stderr, q.stderr[-2000:]
    assert not leftover_builds(sandlot)


# ---------------------------------------------------------------------------
# the daemon

def test_daemon_image_field_and_default_image(sandlot, minimal, session_dirs, tmp_path_factory):
    from daemon import Daemon
    base = tmp_path_factory.mktemp("sandlotd-img", numbered=True)
    data = session_dirs["data_dir"] / "daemon" / base.name
    data.mkdir(parents=True)
    # The daemon's data dir shares the session's image store.
    (data / "images").symlink_to(images_dir(sandlot))
    d = Daemon(base, data_dir=data, extra_args=["--default-image", "minimal"]).start()
    try:
        r = d.post("/v1/sandboxes", json_body={})
        assert r.status == 201, r
        sid = r.json()["id"]
        info = d.get(f"/v1/sandboxes/{sid}").json()
        assert info["options"]["image"] == "minimal", info
        out = d.exec(sid, command="test -e /usr/bin/gcc && echo host || echo image")
        assert out["stdout"] == "image\n", out
        hid = d.create(image="host")
        out = d.exec(hid, command="test -e /usr/bin/gcc && echo host || echo image")
        assert out["stdout"] == "host\n", out
        r = d.post("/v1/sandboxes", json_body={"image": "no-such-image"})
        assert r.status == 400 and "unknown image" in r.body.decode(), r
        # In use while the daemon's sandbox runs on it.
        p = image_cmd(sandlot, "rm", "minimal")
        assert p.returncode == 1 and "in use" in p.stderr, p
        for s in (sid, hid):
            assert d.delete(f"/v1/sandboxes/{s}").status in (200, 204)
    finally:
        rc = d.stop()
    assert rc == 0, d.logs()
    # A missing default image stops the daemon from starting, with a reason.
    p = subprocess.run([str(Path(SANDLOT).parent / "sandlotd"), "--listen",
                        f"unix:{base}/x.sock", "--data-dir", str(data),
                        "--default-image", "no-such-image"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 1 and 'unknown image "no-such-image"' in p.stderr, p.stderr


# ---------------------------------------------------------------------------
# removal (last: it removes the module's image)

def test_rm_refused_while_in_use_then_removes(sandlot, minimal):
    digest = minimal["digest"][7:]
    a = sandlot.popen(["--image", "minimal", "--", "sh", "-c", "echo up; sleep 30"])
    try:
        assert a.stdout.readline() == b"up\n"
        p = image_cmd(sandlot, "rm", "minimal")
        assert p.returncode == 1, p
        assert 'image "minimal" is in use by 1 sandbox' in p.stderr, p.stderr
        assert (images_dir(sandlot) / digest / "rootfs").is_dir()
        assert json.loads(image_cmd(sandlot, "ls", "--json").stdout)["images"][0]["in_use"] == 1
    finally:
        a.send_signal(signal.SIGTERM)
        a.communicate(timeout=30)
    p = image_cmd(sandlot, "rm", "minimal")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == minimal["digest"]
    assert not (images_dir(sandlot) / digest).exists()
    assert not (images_dir(sandlot) / "names" / "minimal").exists()
    assert not leftover_builds(sandlot)
    assert json.loads(image_cmd(sandlot, "ls", "--json").stdout)["images"] == []
    r = sandlot.run(["--image", "minimal", "--", "true"])
    assert r.rc == 2 and 'unknown image "minimal"' in r.stderr, r
    p = image_cmd(sandlot, "rm", "minimal")
    assert p.returncode == 1 and "unknown image" in p.stderr
    p = image_cmd(sandlot, "rm", "host")
    assert p.returncode == 1 and "built in" in p.stderr
