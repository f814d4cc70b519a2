/** The Deep Agents backend against a real sandlotd. */
import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import { createDeepAgent, SandboxError } from "deepagents";
import { fakeModel } from "@langchain/core/testing";
import { AIMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import { SandlotError } from "sandlot";
import { SandlotBackend, globToRegExp } from "sandlot/deepagents";
import { Daemon, skipReason } from "./daemon.js";

const skip = skipReason();
const enc = (s: string) => new TextEncoder().encode(s);

describe("Deep Agents SandlotBackend", { skip }, () => {
  let d: Daemon;
  let backend: SandlotBackend;

  before(async () => {
    d = await new Daemon().start();
    backend = await SandlotBackend.create({ client: d.client, maxOutputBytes: 4096 });
  });

  after(async () => {
    await backend?.close();
    const problems = await d.stop();
    assert.deepEqual(problems, [], problems.join("\n"));
  });

  test("id and execute: interleaved output, exit codes, truncation, timeouts", async () => {
    assert.match(backend.id, /^sb-/);
    const r = await backend.execute("echo one; echo two >&2; echo three; exit 7");
    assert.deepEqual(r, { output: "one\ntwo\nthree\n", exitCode: 7, truncated: false });
    assert.equal((await backend.execute("pwd")).output, "/home/user\n");
    const big = await backend.execute("head -c 10000 /dev/zero | tr '\\0' a");
    assert.equal(big.truncated, true);
    assert.ok(big.output.startsWith("a".repeat(4096)));
    assert.match(big.output, /output truncated: 10000 bytes, first 4096 shown/);
    assert.equal((await backend.execute("kill -9 $$")).exitCode, 137);
    const nf = await backend.execute("definitely-not-a-command");
    assert.equal(nf.exitCode, 127);
    assert.match(nf.output, /not found/);
    assert.equal((await backend.execute("")).exitCode, 1);
    const quick = new SandlotBackend(backend.sandbox, { timeoutMs: 200 });
    const to = await quick.execute("sleep 30");
    assert.match(to.output, /timed out after 200 ms/);
    assert.equal(to.exitCode, 137);
  });

  test("uploadFiles / downloadFiles report per-file errors", async () => {
    const up = await backend.uploadFiles([
      ["/home/user/up/a.txt", enc("A")],
      ["rel/b.bin", new Uint8Array([0, 255])],
      ["/home/user/up", enc("onto a directory")],
      ["/usr/forbidden.txt", enc("read-only root")],
      ["", enc("no name")],
    ]);
    assert.deepEqual(up.map((r) => r.error), [null, null, "is_directory", "permission_denied", "invalid_path"]);
    const down = await backend.downloadFiles(["/home/user/up/a.txt", "/home/user/rel/b.bin", "/home/user/nope", "/home/user/up"]);
    assert.equal(Buffer.from(down[0]!.content!).toString(), "A");
    assert.deepEqual([...down[1]!.content!], [0, 255]);
    assert.deepEqual(down.slice(2).map((r) => [r.content, r.error]), [[null, "file_not_found"], [null, "is_directory"]]);
  });

  test("ls, read (pages, binary, missing), write, edit, delete", async () => {
    await backend.write("/home/user/proj/main.py", "line1\nline2\nline3\nline4\n");
    await backend.write("/home/user/proj/pkg/util.py", "def f():\n    return 42\n");
    const ls = await backend.ls("/home/user/proj");
    assert.deepEqual(ls.files?.map((f) => [f.path, f.is_dir]).sort(), [
      ["/home/user/proj/main.py", false], ["/home/user/proj/pkg/", true],
    ]);
    assert.deepEqual(await backend.ls("/home/user/none"), { files: [] }, "a missing directory lists as empty, as BaseSandbox.ls");
    assert.match((await backend.ls("/home/user/proj/main.py")).error ?? "", /main\.py: Not a directory/);

    const page = await backend.read("/home/user/proj/main.py", 1, 2);
    assert.deepEqual(page, { content: "line2\nline3", mimeType: "text/plain", totalLines: 4, startLine: 2, endLine: 3, nextOffset: 3 });
    assert.equal((await backend.read("/home/user/proj/main.py", 2, 10)).nextOffset, undefined);
    assert.match((await backend.read("/home/user/proj/missing.py")).error ?? "", /not found/);
    assert.match((await backend.read("/home/user/proj")).error ?? "", /is a directory/);
    await backend.uploadFiles([["/home/user/proj/img.png", new Uint8Array([137, 80, 78, 71])]]);
    const img = await backend.read("/home/user/proj/img.png");
    assert.equal(img.mimeType, "image/png");
    assert.deepEqual([...(img.content as Uint8Array)], [137, 80, 78, 71]);
    await backend.write("/home/user/proj/empty.txt", "");
    assert.match(String((await backend.read("/home/user/proj/empty.txt")).content), /empty contents/);

    const ed = await backend.edit("/home/user/proj/pkg/util.py", "42", "43");
    assert.equal(ed.error, undefined);
    assert.equal((await backend.execute("cat proj/pkg/util.py")).output, "def f():\n    return 43\n");
    assert.equal((await backend.delete("/home/user/proj/empty.txt")).error, undefined);
    assert.match((await backend.delete("/home/user/proj/empty.txt")).error ?? "", /not found/);
  });

  test("grep: literal, glob filter, paths with colons, binary skipped, max count", async () => {
    await backend.write("/home/user/g/a.py", "x = 1  # TODO: fix\nprint('TODO')\n");
    await backend.write("/home/user/g/b.txt", "TODO later\n");
    await backend.write("/home/user/g/odd:name.txt", "a TODO with .* regex chars\n");
    await backend.uploadFiles([["/home/user/g/blob.dat", new Uint8Array([0, 84, 79, 68, 79, 0])]]);
    const all = await backend.grep("TODO", "/home/user/g");
    assert.deepEqual(all.matches?.map((m) => `${m.path}:${m.line}`).sort(), [
      "/home/user/g/a.py:1", "/home/user/g/a.py:2", "/home/user/g/b.txt:1", "/home/user/g/odd:name.txt:1",
    ]);
    assert.equal(all.matches?.find((m) => m.path.endsWith("odd:name.txt"))?.text, "a TODO with .* regex chars");
    const py = await backend.grep("TODO", "/home/user/g", "*.py");
    assert.deepEqual(py.matches?.map((m) => m.line), [1, 2]);
    assert.equal((await backend.grep(".*", "/home/user/g")).matches?.length, 1, "the pattern is literal");
    const capped = await backend.grep("TODO", "/home/user/g", null, 2);
    assert.equal(capped.matches?.length, 2);
    assert.equal(capped.truncated, true);
    assert.deepEqual((await backend.grep("nothing-matches-this", "/home/user/g")).matches, []);
    assert.match((await backend.grep("x", "/home/user/no-dir")).error ?? "", /no-dir/);
    const fromRoot = await backend.grep("a TODO with", "/");
    assert.deepEqual(fromRoot.matches?.map((m) => m.path), ["/home/user/g/odd:name.txt"]);
  });

  test("glob: **, *, ?, braces; relative paths", async () => {
    await backend.write("/home/user/gl/src/a.ts", "a");
    await backend.write("/home/user/gl/src/deep/b.ts", "b");
    await backend.write("/home/user/gl/readme.md", "r");
    await backend.write("/home/user/gl/src/c.js", "c");
    const ts = await backend.glob("**/*.ts", "/home/user/gl");
    assert.deepEqual(ts.files?.map((f) => f.path), ["src/a.ts", "src/deep/b.ts"]);
    const top = await backend.glob("*", "/home/user/gl");
    assert.deepEqual(top.files?.map((f) => `${f.path}:${f.is_dir}`), ["readme.md:false", "src:true"]);
    assert.deepEqual((await backend.glob("src/?.{js,ts}", "/home/user/gl")).files?.map((f) => f.path), ["src/a.ts", "src/c.js"]);
    assert.match((await backend.glob("[abc", "/home/user/gl")).error ?? "", /unclosed/);
    const fromRoot = await backend.glob("**/deep/*.ts");
    assert.deepEqual(fromRoot.files?.map((f) => f.path), ["home/user/gl/src/deep/b.ts"], "\"/\" searches /home/user and /tmp");
    assert.ok(globToRegExp("**/x").test("x") && globToRegExp("**/x").test("a/b/x") && !globToRegExp("*.ts").test("a/b.ts"));
  });

  test("isRunning: true once created, false after close", async () => {
    assert.equal(backend.isRunning, true);
    const tmp = await SandlotBackend.create({ client: d.client });
    assert.equal(tmp.isRunning, true);
    await tmp.close();
    assert.equal(tmp.isRunning, false);
    assert.equal((await d.client.info(tmp.id)).state, "deleted");
    await tmp.close(); // a second close is a no-op
  });

  test("a sandbox deleted behind the backend's back: the operation throws and isRunning turns false", async () => {
    const tmp = await SandlotBackend.create({ client: d.client });
    await d.client.sandbox(tmp.id).delete();
    assert.equal(tmp.isRunning, true, "not known yet");
    await assert.rejects(tmp.ls("/home/user"), (e: unknown) => e instanceof SandlotError && e.sandboxGone);
    assert.equal(tmp.isRunning, false);
  });

  test("create with initialFiles: text files written (parents made, relative ones under /home/user) before it is handed out", async () => {
    const tmp = await SandlotBackend.create({
      client: d.client,
      initialFiles: { "/home/user/init/a.txt": "alpha", "rel/dir/b.sh": "#!/bin/sh\necho from-b\n", "/tmp/empty": "" },
    });
    try {
      assert.equal((await tmp.execute("cat init/a.txt")).output, "alpha");
      assert.deepEqual(await tmp.execute("sh /home/user/rel/dir/b.sh"), { output: "from-b\n", exitCode: 0, truncated: false });
      assert.equal((await tmp.execute("stat -c %s /tmp/empty")).output, "0\n");
      assert.deepEqual((await tmp.ls("/home/user/rel/dir")).files?.map((f) => f.path), ["/home/user/rel/dir/b.sh"]);
    } finally {
      await tmp.close();
    }
  });

  test("create with an initial file that cannot be written fails naming it, and deletes the sandbox", async () => {
    const before = new Set((await d.client.list({ state: "running" })).map((s) => s.id));
    await assert.rejects(
      SandlotBackend.create({ client: d.client, initialFiles: { "/home/user/ok.txt": "fine", "/usr/not-writable.txt": "no" } }),
      (e: unknown) => e instanceof SandlotError && /initialFiles could not be written: \/usr\/not-writable\.txt: /.test(e.message),
    );
    const after = (await d.client.list({ state: "running" })).filter((s) => !before.has(s.id));
    assert.deepEqual(after, [], "the half-made sandbox is deleted");
  });

  test("two-step creation: new SandlotBackend({...}) then initialize()", async () => {
    const tmp = new SandlotBackend({ client: d.client, initialFiles: { "two/step.txt": "ok" }, timeoutMs: 5000 });
    assert.equal(tmp.isRunning, false);
    assert.throws(() => tmp.id, (e: unknown) => SandboxError.isInstance(e) && e.code === "NOT_INITIALIZED");
    await assert.rejects(tmp.execute("true"), (e: unknown) => SandboxError.isInstance(e) && e.code === "NOT_INITIALIZED");
    await tmp.close(); // nothing to delete yet
    const init = tmp.initialize();
    await assert.rejects(tmp.initialize(), (e: unknown) => SandboxError.isInstance(e) && e.code === "ALREADY_INITIALIZED", "while the first runs");
    await init;
    try {
      assert.equal(tmp.isRunning, true);
      assert.match(tmp.id, /^sb-/);
      assert.equal((await tmp.execute("cat two/step.txt")).output, "ok");
      await assert.rejects(tmp.initialize(), (e: unknown) => SandboxError.isInstance(e) && e.code === "ALREADY_INITIALIZED");
      await assert.rejects(new SandlotBackend(tmp.sandbox).initialize(), (e: unknown) => SandboxError.isInstance(e) && e.code === "ALREADY_INITIALIZED");
    } finally {
      await tmp.close();
    }
    assert.equal(tmp.isRunning, false);
  });

  test("a sandbox that is gone is an error, not a silent empty answer", async () => {
    const gone = await SandlotBackend.create({ client: d.client });
    await gone.close();
    await assert.rejects(gone.execute("true"), (e: unknown) => e instanceof SandlotError && e.code === "sandbox_ended");
    await assert.rejects(gone.downloadFiles(["/home/user/x"]), (e: unknown) => e instanceof SandlotError && e.status === 410);
    await assert.rejects(gone.ls("/home/user"), (e: unknown) => e instanceof SandlotError && e.status === 410);
  });

  test("createDeepAgent with a fake model: execute, write_file, read_file, ls, grep", async () => {
    const model = fakeModel()
      .respondWithTools([{ name: "write_file", args: { file_path: "/home/user/agent/data.csv", content: "a,b\n1,2\n3,4\n" }, id: "t1" }])
      .respondWithTools([{ name: "execute", args: { command: "cd agent && awk -F, 'NR>1 {s+=$2} END {print s}' data.csv | tee total.txt" }, id: "t2" }])
      .respondWithTools([
        { name: "read_file", args: { file_path: "/home/user/agent/total.txt" }, id: "t3" },
        { name: "ls", args: { path: "/home/user/agent" }, id: "t4" },
        { name: "grep", args: { pattern: "3,4", path: "/home/user/agent" }, id: "t5" },
      ])
      .respond(new AIMessage("The total of column b is 6."));
    const agent = createDeepAgent({ model, backend });
    const result = await agent.invoke({ messages: [{ role: "user", content: "Sum column b of a CSV in the sandbox." }] });
    const messages = result.messages as BaseMessage[];
    const tools = new Map(messages.filter((m): m is ToolMessage => ToolMessage.isInstance(m)).map((m) => [m.tool_call_id, contentText(m)]));
    assert.match(tools.get("t1") ?? "", /data\.csv/);
    assert.match(tools.get("t2") ?? "", /^6\n/);
    assert.match(tools.get("t2") ?? "", /exit code 0|succeeded/i);
    assert.match(tools.get("t3") ?? "", /6/);
    assert.match(tools.get("t4") ?? "", /data\.csv/);
    assert.match(tools.get("t4") ?? "", /total\.txt/);
    assert.match(tools.get("t5") ?? "", /data\.csv/);
    assert.equal(contentText(messages[messages.length - 1]!), "The total of column b is 6.");
    assert.equal(Buffer.from(await backend.sandbox.readFile("agent/total.txt")).toString(), "6\n");
  });
});

function contentText(m: BaseMessage): string {
  if (typeof m.content === "string") return m.content;
  return m.content.map((c) => ("text" in c ? String(c.text) : "")).join("");
}
