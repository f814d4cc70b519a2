/** The core client against a real sandlotd. */
import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import { Readable } from "node:stream";
import { Sandlot, SandlotError, isMissingPath, type Sandbox, type ExecEvent } from "sandlot";
import { Daemon, readStream, skipReason, sleep } from "./daemon.js";

const skip = skipReason();

describe("Sandlot client", { skip }, () => {
  let d: Daemon;
  let c: Sandlot;
  let sb: Sandbox;

  before(async () => {
    d = await new Daemon().start();
    c = d.client;
    sb = await c.create({ memory: "256M", metadata: { suite: "client" } });
  });

  after(async () => {
    await sb?.delete().catch(() => {});
    const problems = await d.stop();
    assert.deepEqual(problems, [], problems.join("\n"));
  });

  test("health, create, get, list by label", async () => {
    const h = await c.health();
    assert.equal(h.status, "ok");
    assert.match(sb.id, /^sb-[a-z2-7]{26}$/);
    assert.equal(sb.info?.state, "running");
    assert.equal(sb.info?.options.memory, 256 * 1024 * 1024);
    const again = await c.get(sb.id);
    assert.equal(again.info?.id, sb.id);
    const listed = await c.list({ labels: { suite: "client" } });
    assert.deepEqual(listed.map((s) => s.id), [sb.id]);
    assert.deepEqual(await c.list({ labels: ["suite=nothing"] }), []);
  });

  test("exec: shell string, argv, env, cwd, stdin, exit codes", async () => {
    const r = await sb.exec("echo out; echo err >&2; exit 3");
    assert.equal(r.exit_code, 3);
    assert.equal(r.stdout, "out\n");
    assert.equal(r.stderr, "err\n");
    const a = await sb.exec(["python3", "-c", "import os,sys; print(os.environ['X'], os.getcwd(), sys.stdin.read())"],
      { env: { X: "42" }, cwd: "/tmp", stdin: "fed" });
    assert.equal(a.exit_code, 0, a.stderr);
    assert.equal(a.stdout, "42 /tmp fed\n");
    const nf = await sb.exec(["no-such-program"]);
    assert.equal(nf.exit_code, 127);
    assert.match(nf.error ?? "", /no-such-program/);
    const to = await sb.exec("sleep 30", { timeout_ms: 200 });
    assert.equal(to.timed_out, true);
    assert.throws(() => sb.exec([]), (e: unknown) => e instanceof SandlotError && /non-empty/.test(e.message));
  });

  test("execStream: live events in order, then the exit", async () => {
    const events: ExecEvent[] = [];
    for await (const ev of sb.execStream("for i in 1 2 3; do echo $i; sleep 0.05; done; echo bad >&2; exit 2"))
      events.push(ev);
    assert.equal(events[0]?.type, "start");
    const out = events.filter((e) => e.type === "stdout").map((e) => (e as { data: string }).data).join("");
    assert.equal(out, "1\n2\n3\n");
    assert.ok(events.some((e) => e.type === "stderr"));
    const last = events[events.length - 1];
    assert.equal(last?.type, "exit");
    assert.equal(last?.type === "exit" && last.result.exit_code, 2);
  });

  test("aborting a streamed exec kills the command", async () => {
    const ctl = new AbortController();
    const it = sb.execStream("echo started; sleep 30; touch /home/user/not-killed", { signal: ctl.signal });
    let sawOutput = false;
    await assert.rejects(async () => {
      for await (const ev of it) {
        if (ev.type === "stdout") {
          sawOutput = true;
          ctl.abort();
        }
      }
    }, (e: unknown) => (e as Error).name === "AbortError");
    assert.ok(sawOutput);
    // sandlotd kills the command when the stream closes: nothing is left running.
    let running = 1;
    for (let i = 0; i < 50 && running; i++) {
      running = (await sb.execs()).filter((e) => e.state === "running").length;
      if (running) await sleep(50);
    }
    assert.equal(running, 0);
  });

  test("abort before the call, and a buffered exec aborted midway", async () => {
    const ctl = new AbortController();
    ctl.abort(new Error("stop now"));
    await assert.rejects(sb.exec("true", { signal: ctl.signal }), /stop now/);
    const ctl2 = new AbortController();
    const t0 = Date.now();
    const ex = sb.exec("sleep 30", { signal: ctl2.signal });
    // Aborted while the command runs.
    for (let i = 0; i < 200 && !(await sb.execs()).some((e) => e.state === "running"); i++) await sleep(50);
    assert.ok((await sb.execs()).some((e) => e.state === "running"), "the exec never ran");
    ctl2.abort();
    await assert.rejects(ex, (e: unknown) => (e as Error).name === "AbortError");
    assert.ok(Date.now() - t0 < 5000);
  });

  test("background exec: stdin, follow, kill", async () => {
    const ex = await sb.spawn("cat; echo done >&2", { output: "base64" });
    await ex.writeStdin("hello ");
    await ex.writeStdin(new Uint8Array([0, 255, 10]), { eof: true });
    let out = Buffer.alloc(0);
    let err = "";
    let code: number | null = null;
    for await (const ev of ex.follow()) {
      if (ev.type === "stdout") out = Buffer.concat([out, Buffer.from(ev.data, "base64")]);
      if (ev.type === "stderr") err += Buffer.from(ev.data, "base64").toString();
      if (ev.type === "exit") code = ev.result.exit_code;
    }
    assert.deepEqual([...out], [...Buffer.from("hello "), 0, 255, 10]);
    assert.equal(err, "done\n");
    assert.equal(code, 0);
    const long = await sb.spawn("sleep 60");
    await long.kill("TERM");
    const st = await waitExited(long);
    assert.equal(st.result?.signal, 15);
    await assert.rejects(long.kill(), (e: unknown) => e instanceof SandlotError && e.status === 409);
  });

  test("files: binary-safe, streamed both ways, metadata, listing, removal", async () => {
    const all = new Uint8Array(256).map((_, i) => i);
    await sb.writeFile("bin/all.bin", all, { mode: 0o600 });
    assert.deepEqual([...(await sb.readFile("bin/all.bin"))], [...all]);
    const st = await sb.stat("/home/user/bin/all.bin");
    assert.equal(st.type, "file");
    assert.equal(st.size, 256);
    assert.equal(st.mode, "0600");

    // 3 MiB from a Node stream in, and out as a web stream.
    const chunk = Buffer.alloc(64 * 1024, "x");
    const big = Readable.from((function* () { for (let i = 0; i < 48; i++) yield chunk; })());
    const w = await sb.writeFile("big.txt", big);
    assert.equal(w.size, 48 * 64 * 1024);
    const back = await readStream(await sb.readFileStream("big.txt"));
    assert.equal(back.length, 48 * 64 * 1024);
    assert.ok(back.every((b) => b === 0x78));

    await sb.mkdir("d1/d2");
    const names = (await sb.list("/home/user")).map((e) => `${e.name}:${e.type}`).sort();
    assert.ok(names.includes("bin:directory") && names.includes("big.txt:file") && names.includes("d1:directory"), names.join());
    await sb.remove("big.txt");
    await assert.rejects(sb.readFile("big.txt"), (e: unknown) => isMissingPath(e));
    await assert.rejects(sb.remove("d1"), (e: unknown) => e instanceof SandlotError && e.code === "conflict");
    await sb.remove("d1", { recursive: true });
    await assert.rejects(sb.stat("d1"), (e: unknown) => isMissingPath(e) && /d1/.test((e as Error).message));
  });

  test("missing and bad paths give clear errors", async () => {
    await assert.rejects(sb.readFile("nope/none.txt"), (e: unknown) =>
      e instanceof SandlotError && e.status === 404 && e.code === "not_found" && !e.sandboxGone && /none\.txt/.test(e.message));
    await sb.writeFile("plain.txt", "x");
    await assert.rejects(sb.list("plain.txt"), (e: unknown) =>
      e instanceof SandlotError && e.status === 400 && /Not a directory/.test(e.message));
    await assert.rejects(sb.writeFile("/home/user", "x"), (e: unknown) =>
      e instanceof SandlotError && /Is a directory/.test(e.message));
  });

  test("sparse files: sizes and bytes on disk, downloads over maxBytes refused first", async () => {
    const r = await sb.exec("truncate -s 300M sparse.bin && mkdir -p sp && truncate -s 300M sp/z");
    assert.equal(r.exit_code, 0, r.stderr);
    const st = await sb.stat("sparse.bin");
    assert.equal(st.size, 300 * 1024 * 1024);
    assert.ok(st.allocated < 65536, `allocated ${st.allocated}`);
    const ent = (await sb.list("/home/user")).find((e) => e.name === "sparse.bin");
    assert.ok(ent && ent.allocated < 65536 && ent.size === st.size);
    await sb.writeFile("five.txt", "12345");
    assert.equal(await sb.readText("five.txt", { maxBytes: 5 }), "12345");
    await assert.rejects(sb.readFile("five.txt", { maxBytes: 4 }), (e: unknown) =>
      e instanceof SandlotError && e.status === 413 && e.code === "too_large" && /5 bytes/.test(e.message));
    await assert.rejects(sb.readFileStream("sparse.bin", { maxBytes: 1 << 20 }), (e: unknown) =>
      e instanceof SandlotError && e.code === "too_large" && /314572800 bytes/.test(e.message));
    await assert.rejects(sb.downloadArchive({ path: "sp", maxBytes: 1 << 20 }), (e: unknown) =>
      e instanceof SandlotError && e.code === "too_large");
    assert.throws(() => sb.readFile("five.txt", { maxBytes: 0 }), (e: unknown) =>
      e instanceof SandlotError && e.code === "bad_option");
    await sb.remove("sp", { recursive: true });
    await sb.remove("sparse.bin");
  });

  test("archives and snapshot round-trip a tree", async () => {
    await sb.writeFile("tree/a.txt", "A");
    await sb.writeFile("tree/sub/b.txt", "B");
    const tar = await readStream(await sb.downloadArchive({ path: "tree" }));
    const other = await c.create();
    try {
      const r = await other.uploadArchive(tar, { path: "/home/user/copy" });
      assert.equal(r.files, 2);
      assert.equal(await other.readText("copy/sub/b.txt"), "B");
      const snap = await readStream(await other.snapshot());
      assert.ok(snap.length >= 1024);
    } finally {
      await other.delete();
    }
  });

  test("ports: create, expose, set, remove, and the errors", async () => {
    const p = await d.client.create({ memory: "128M", ports: [8000] });
    try {
      assert.deepEqual(p.info!.ports.map((x) => x.port), [8000]);
      assert.deepEqual(p.info!.options.ports, [8000]);
      assert.match(p.info!.ports[0]!.url!, /^http:\/\/127\.0\.0\.1:\d+$/);
      const added = await p.exposePort(9000);
      assert.equal(added.port, 9000);
      assert.deepEqual((await p.ports()).map((x) => x.port), [8000, 9000]);
      await assert.rejects(p.exposePort(9000), (e: unknown) => e instanceof SandlotError && e.status === 409);
      await assert.rejects(p.exposePort(0), (e: unknown) => e instanceof SandlotError && e.status === 400);
      const set = await p.setPorts([9000, 9001]);
      assert.deepEqual(set.map((x) => x.port), [9000, 9001]);
      assert.equal(set[0]!.url, added.url);
      await p.removePort(9001);
      await assert.rejects(p.removePort(9001),
        (e: unknown) => e instanceof SandlotError && e.status === 404 && e.code === "port_not_exposed");
      assert.deepEqual(p.info!.ports.map((x) => x.port), [9000]);
      const ep = await p.portEndpoint(9000);
      assert.equal(ep.url, added.url + "/");
      await assert.rejects(p.portEndpoint(9000, { via: "proxy" }), /unix-socket/);
      await p.pause();
      assert.deepEqual(p.info!.ports, [{ port: 9000, url: null }]);
      await assert.rejects(p.portEndpoint(9000), /no URL now/);
    } finally {
      await p.delete();
    }
    await assert.rejects(d.client.create({ ports: [8000, 8000] }), /listed twice/);
  });

  test("a download cut mid-stream errors with a SandlotError, never a short archive", async () => {
    for (const how of ["archive", "file"] as const) {
      const cut = await c.create({ memory: "256M" });
      try {
        const r = await cut.exec("mkdir out && head -c 64M /dev/urandom > out/b.bin");
        assert.equal(r.exit_code, 0);
        const stream = how === "archive" ? await cut.downloadArchive({ path: "out" })
          : await cut.readFileStream("out/b.bin");
        const reader = stream.getReader();
        let got = 0;
        while (got < 2 << 20) {
          const { value, done } = await reader.read();
          assert.ok(!done, "ended before 2 MiB");
          got += value!.length;
        }
        // The sandbox's init dies: the rest of the body cannot come.
        d.killInit(cut.id);
        await assert.rejects(async () => {
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            got += value!.length;
          }
        }, (e: unknown) => e instanceof SandlotError && e.code === "io" && /cut short/.test(e.message));
        assert.ok(got < 60 << 20, `${got} bytes`);
      } finally {
        await cut.delete().catch(() => {});
      }
    }
  });

  test("changes report what commands and file calls did", async () => {
    const fresh = await c.create();
    try {
      const r = await fresh.exec("mkdir -p out && echo 1 > out/r.txt");
      assert.deepEqual(r.changes.map((x) => `${x.kind} ${x.path}`).sort(),
        ["created /home/user/out", "created /home/user/out/r.txt"]);
      await fresh.writeFile("api.txt", "a");
      const page = await fresh.changes(r.cursor);
      assert.deepEqual(page.changes.map((x) => `${x.kind} ${x.path} ${x.source}`), ["created /home/user/api.txt api"]);
      const none = await fresh.changes(page.cursor);
      assert.deepEqual(none.changes, []);
    } finally {
      await fresh.delete();
    }
  });

  test("code contexts keep state; streamed cells", async () => {
    const r1 = await sb.runCode("x = 6 * 7", { language: "python" });
    assert.equal(r1.status, "ok");
    const r2 = await sb.runCode("x + 1", { language: "python" });
    assert.equal(r2.value, "43");
    const ctx = await sb.createContext("javascript");
    await sb.runCode("let y = 5", { context: ctx.id });
    const kinds: string[] = [];
    let result: unknown;
    for await (const ev of sb.runCodeStream("console.log('hi'); y * 2", { context: ctx.id })) {
      kinds.push(ev.type);
      if (ev.type === "result") result = ev;
    }
    assert.ok(kinds.includes("stdout"));
    assert.equal((result as { value: string }).value, "10");
    assert.ok((await sb.contexts()).some((x) => x.id === ctx.id));
    await sb.deleteContext(ctx.id);
    const err = await sb.runCode("1/0");
    assert.equal(err.status, "error");
    assert.equal(err.error?.name, "ZeroDivisionError");
  });

  test("pause and resume keep the files", async () => {
    const p = await c.create();
    try {
      await p.writeFile("keep.txt", "kept");
      const paused = await p.pause();
      assert.equal(paused.state, "paused");
      await assert.rejects(p.exec("true"), (e: unknown) => e instanceof SandlotError && e.code === "sandbox_paused" && e.state === "paused");
      const resumed = await p.resume();
      assert.equal(resumed.state, "running");
      assert.equal(await p.readText("keep.txt"), "kept");
    } finally {
      await p.delete();
    }
  });

  test("pause with memory is sent (an ns sandbox refuses it)", async () => {
    const p = await c.create();
    try {
      await assert.rejects(p.pause({ memory: true }), (e: unknown) =>
        e instanceof SandlotError && e.code === "not_supported" && e.status === 501 && /pause their files only/.test(e.message));
      assert.equal((await p.refresh()).state, "running");
      assert.equal((await p.pause({ memory: false })).state, "paused");
    } finally {
      await p.delete();
    }
  });

  test("bad and ended sandbox ids", async () => {
    await assert.rejects(c.get("sb-bad"), (e: unknown) =>
      e instanceof SandlotError && e.code === "not_found" && /invalid sandbox id "sb-bad"/.test(e.message));
    await assert.rejects(c.sandbox("sb-aaaaaaaaaaaaaaaaaaaaaaaaaa").exec("true"), (e: unknown) =>
      e instanceof SandlotError && e.sandboxGone && /no sandbox sb-a/.test(e.message));
    const gone = await c.create();
    await gone.delete();
    await assert.rejects(gone.readFile("x"), (e: unknown) =>
      e instanceof SandlotError && e.status === 410 && e.code === "sandbox_ended" && e.endReason === "deleted" && e.sandboxGone);
    await assert.rejects(c.create({ memory: "lots" }), (e: unknown) =>
      e instanceof SandlotError && e.status === 400 && /memory/.test(e.message));
  });

  test("network policy: set, read, log; packages: bad specifiers", async () => {
    assert.deepEqual(sb.info?.options.network, { mode: "none", allow: [], deny: [] });
    const info = await sb.setNetworkPolicy({ allow: ["Example.TEST", "*.pypi.test"], deny: ["x.pypi.test"] });
    assert.deepEqual(info.options.network,
      { mode: "allowlist", allow: ["example.test", "*.pypi.test"], deny: ["x.pypi.test"] });
    assert.deepEqual(await sb.networkPolicy(), info.options.network);
    // A name the policy does not allow: refused by sandlot, logged, never sent upstream.
    const r = await sb.exec("getent hosts blocked.example; echo rc=$?");
    assert.match(r.stdout, /rc=2/);
    const log = await sb.networkLog();
    const refused = log.events.filter((e) => e.name === "blocked.example");
    assert.ok(refused.length > 0 && refused.every((e) => e.layer === "dns" && e.verdict === "refused" &&
      e.reason === "not_allowed"), JSON.stringify(log));
    assert.deepEqual((await sb.networkLog(log.next)).events, []);
    await assert.rejects(sb.setNetworkPolicy({ mode: "allowlist", allow: ["*"] }), (e: unknown) =>
      e instanceof SandlotError && e.status === 400 && /whole first label/.test(e.message));
    await sb.setNetworkPolicy("none");
    assert.equal((await sb.networkPolicy()).mode, "none");
    await assert.rejects(sb.installPackages({ pip: ["--index-url=https://evil.example"] }), (e: unknown) =>
      e instanceof SandlotError && e.status === 400 && /invalid pip package/.test(e.message));
    await assert.rejects(c.create({ packages: { npm: ["git+https://x/y.git"] } }), (e: unknown) =>
      e instanceof SandlotError && e.status === 400 && /invalid npm package/.test(e.message));
  });

  test("an unreachable daemon and a bad URL are clear errors", async () => {
    const nowhere = new Sandlot({ socketPath: `${d.base}/no.sock` });
    await assert.rejects(nowhere.health(), (e: unknown) =>
      e instanceof SandlotError && e.code === "unreachable" && e.message.includes(`${d.base}/no.sock`));
    assert.throws(() => new Sandlot({ url: "https://x" }), /http:\/\//);
  });
});

async function waitExited(ex: { status(): Promise<import("sandlot").ExecStatus> }) {
  for (let i = 0; i < 100; i++) {
    const st = await ex.status();
    if (st.state === "exited") return st;
    await sleep(50);
  }
  throw new Error("exec did not exit");
}

describe("changes past the daemon's limits", { skip }, () => {
  let d: Daemon;

  before(async () => {
    d = await new Daemon(["--changes-scan-bytes", "64K", "--changes-answer-bytes", "64K",
      "--changes-log-bytes", "1M", "--changes-total-bytes", "2M"]).start();
  });

  after(async () => {
    const problems = await d.stop();
    assert.deepEqual(problems, [], problems.join("\n"));
  });

  test("results say changes_truncated, changes() pages, allChanges() follows them", async () => {
    const sb = await d.client.create();
    try {
      const r = await sb.exec("for n in $(seq 1 1500); do : > file-with-a-long-name-of-some-sixty-bytes-$n; done");
      assert.equal(r.exit_code, 0);
      assert.equal(r.changes_truncated, true);
      assert.ok(r.changes.length > 0 && r.changes.length < 1500, String(r.changes.length));
      const page = await sb.changes(0);
      assert.equal(page.more, true);
      assert.equal(page.cursor, page.changes[page.changes.length - 1].cursor);
      const all = await sb.allChanges(0);
      assert.ok(!all.truncated);
      const cursors = all.changes.map((ch) => ch.cursor);
      assert.deepEqual(cursors, cursors.map((_, i) => i + 1));
      assert.ok(cursors.length > page.changes.length);
      assert.equal(all.cursor, cursors[cursors.length - 1]);
    } finally {
      await sb.delete();
    }
  });

  test("the net view without caches pages too: allChanges asks each next page with after", async () => {
    const sb = await d.client.create();
    try {
      const base = (await sb.changes()).cursor;
      const name = "w/visible-file-with-a-long-name-of-some-sixty-bytes";
      await sb.exec(`mkdir w; for n in $(seq 1 300); do : > ${name}-$n; done`);
      await sb.exec(`for n in $(seq 301 600); do : > ${name}-$n; done`);
      await sb.exec("mkdir .cache; for n in $(seq 1 100); do : > .cache/h-$n; done");
      await sb.exec(`rm ${name}-1*`); // 1, 10-19, 100-199
      const page = await sb.changes(base, { net: true, excludeHidden: true });
      assert.equal(page.more, true);
      assert.equal(page.hidden, 0);
      const all = await sb.allChanges(base, { net: true, excludeHidden: true });
      assert.ok(!all.truncated);
      assert.equal(all.hidden, 101);
      const files = all.changes.filter((c) => c.type === "file");
      const want = [];
      for (let n = 1; n <= 600; n++) if (!String(n).startsWith("1")) want.push(`/home/user/${name}-${n}`);
      assert.deepEqual(files.map((c) => c.path).sort(), want.sort());
      assert.deepEqual([...new Set(files.map((c) => c.kind))], ["created"]);
      assert.equal(await sb.scanChanges(), all.cursor, "nothing new to log");
    } finally {
      await sb.delete();
    }
  });
});
