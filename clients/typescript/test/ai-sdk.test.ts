/** The AI SDK sandbox session and harness provider against a real sandlotd. */
import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import { ToolLoopAgent, tool, type Experimental_SandboxSession } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import type { LanguageModelV4GenerateResult } from "@ai-sdk/provider";
import { z } from "zod";
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { HarnessCapabilityUnsupportedError, HarnessSandboxAuthenticationError, type HarnessV1NetworkPolicy } from "@ai-sdk/harness";
import { Sandlot, SandlotError, type Sandbox } from "sandlot";
import { SandlotSandboxSession, sandlotHarnessProvider, sandlotNetworkPolicy, HARNESS_SESSION_LABEL } from "sandlot/ai-sdk";
import { Daemon, readStream, skipReason, sleep, waitFor } from "./daemon.js";

const skip = skipReason();

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}
const text = (b: Uint8Array) => Buffer.from(b).toString("utf8");

describe("AI SDK sandbox session", { skip }, () => {
  let d: Daemon;
  let sb: Sandbox;
  let s: SandlotSandboxSession;

  before(async () => {
    d = await new Daemon().start();
    sb = await d.client.create();
    await sb.mkdir("/home/user/work");
    s = new SandlotSandboxSession(sb, { workingDirectory: "work" });
  });

  after(async () => {
    await sb?.delete().catch(() => {});
    const problems = await d.stop();
    assert.deepEqual(problems, [], problems.join("\n"));
  });

  test("it is an Experimental_SandboxSession with a description", () => {
    const typed: Experimental_SandboxSession = s;
    assert.equal(s.workingDirectory, "/home/user/work");
    assert.match(typed.description, /\/home\/user\/work/);
  });

  test("run: output, exit code, env, working directory (relative to the base)", async () => {
    const r = await s.run({ command: "pwd; echo $GREETING; echo oops >&2; exit 4", env: { GREETING: "hi" } });
    assert.deepEqual(r, { exitCode: 4, stdout: "/home/user/work\nhi\n", stderr: "oops\n" });
    await s.run({ command: "mkdir -p sub" });
    assert.equal((await s.run({ command: "pwd", workingDirectory: "sub" })).stdout, "/home/user/work/sub\n");
    assert.equal((await s.run({ command: "pwd", workingDirectory: "/tmp" })).stdout, "/tmp\n");
    const killed = await s.run({ command: "kill -9 $$" });
    assert.equal(killed.exitCode, 137);
    const bad = await s.run({ command: "true", workingDirectory: "no/such/dir" });
    assert.equal(bad.exitCode, 126);
    assert.match(bad.stderr, /no\/such\/dir/);
    await assert.rejects(async () => s.run({ command: "" }), /non-empty string/);
  });

  test("run honours abortSignal", async () => {
    const ctl = new AbortController();
    const t0 = Date.now();
    const run = s.run({ command: "sleep 30", abortSignal: ctl.signal });
    // Aborted while the command runs.
    assert.ok(await waitFor(async () => (await sb.execs()).some((e) => e.state === "running"), 10_000));
    ctl.abort(new Error("user cancelled"));
    await assert.rejects(run, /user cancelled/);
    assert.ok(Date.now() - t0 < 5000);
    // The abort closes the stream; sandlotd notices and kills the command.
    assert.ok(
      await waitFor(async () => (await sb.execs()).filter((e) => e.state === "running").length === 0),
      "the command was still running 5 s after the abort",
    );
  });

  test("spawn: live stdout/stderr streams and wait()", async () => {
    const p = await s.spawn({ command: "echo one; sleep 0.1; echo two; printf '\\377\\000' >&2; exit 5" });
    assert.ok(p.pid && p.pid > 0);
    const [out, err, done] = await Promise.all([readStream(p.stdout), readStream(p.stderr), p.wait()]);
    assert.equal(text(out), "one\ntwo\n");
    assert.deepEqual([...err], [0xff, 0x00]);
    assert.deepEqual(done, { exitCode: 5 });
    await p.kill(); // idempotent after exit
  });

  test("spawn with stdin: write, close (EOF), output, exit", async () => {
    const p = await s.spawn({ command: "tr a-z A-Z", stdin: true });
    const w = p.stdin.getWriter();
    await w.write(new TextEncoder().encode("hello "));
    await w.write(new TextEncoder().encode("sandbox\n"));
    await w.close();
    const [out, done] = await Promise.all([readStream(p.stdout), p.wait()]);
    assert.equal(text(out), "HELLO SANDBOX\n");
    assert.equal(done.exitCode, 0);
  });

  test("spawn: kill() ends the process; abortSignal rejects wait()", async () => {
    const p = await s.spawn({ command: "echo ready; sleep 60" });
    const reader = p.stdout.getReader();
    assert.equal(text((await reader.read()).value!), "ready\n");
    await p.kill();
    await p.kill();
    assert.equal((await p.wait()).exitCode, 137);
    reader.releaseLock();

    const ctl = new AbortController();
    const q = await s.spawn({ command: "sleep 60", stdin: true, abortSignal: ctl.signal });
    ctl.abort(new Error("stop it"));
    await assert.rejects(async () => q.wait(), /stop it/);
    const ctl2 = new AbortController();
    const r = await s.spawn({ command: "sleep 60", abortSignal: ctl2.signal });
    ctl2.abort(new Error("stop that"));
    await assert.rejects(async () => r.wait(), /stop that/);
    let running = 1;
    for (let i = 0; i < 50 && running; i++) {
      running = (await sb.execs()).filter((e) => e.state === "running").length;
      if (running) await sleep(50);
    }
    assert.equal(running, 0, "aborted spawns are killed");
    const pre = new AbortController();
    pre.abort(new Error("too late"));
    await assert.rejects(async () => s.spawn({ command: "true", abortSignal: pre.signal }), /too late/);
  });

  test("files: missing -> null, parents created, text lines, binary, streams", async () => {
    assert.equal(await s.readFile({ path: "missing.txt" }), null);
    assert.equal(await s.readBinaryFile({ path: "missing.txt" }), null);
    assert.equal(await s.readTextFile({ path: "no/dir/missing.txt" }), null);

    await s.writeTextFile({ path: "a/b/notes.txt", content: "l1\nl2\nl3\nl4\n" });
    assert.equal(text(await sb.readFile("/home/user/work/a/b/notes.txt")), "l1\nl2\nl3\nl4\n");
    assert.equal(await s.readTextFile({ path: "a/b/notes.txt", startLine: 2, endLine: 3 }), "l2\nl3\n");
    assert.equal(await s.readTextFile({ path: "a/b/notes.txt", startLine: 4, endLine: 99 }), "l4\n");
    assert.equal(await s.readTextFile({ path: "/home/user/work/a/b/notes.txt", startLine: 9 }), "");

    const bytes = new Uint8Array([0, 1, 2, 250, 255]);
    await s.writeBinaryFile({ path: "/tmp/x/raw.bin", content: bytes });
    assert.deepEqual([...(await s.readBinaryFile({ path: "/tmp/x/raw.bin" }))!], [...bytes]);

    const chunks = ["stream", "ed ", "content"];
    const rs = new ReadableStream<Uint8Array>({
      pull(c) {
        const next = chunks.shift();
        if (next === undefined) c.close();
        else c.enqueue(new TextEncoder().encode(next));
      },
    });
    await s.writeFile({ path: "deep/er/s.txt", content: rs });
    assert.equal(text(await readStream((await s.readFile({ path: "deep/er/s.txt" }))!)), "streamed content");

    await s.writeTextFile({ path: "latin.txt", content: "café", encoding: "latin1" });
    assert.deepEqual([...(await s.readBinaryFile({ path: "latin.txt" }))!], [0x63, 0x61, 0x66, 0xe9]);
    assert.equal(await s.readTextFile({ path: "latin.txt", encoding: "latin1" }), "café");
    await assert.rejects(async () => s.readTextFile({ path: "latin.txt", encoding: "klingon" }), /klingon/);

    await assert.rejects(s.writeTextFile({ path: "a", content: "x" }), /Is a directory/);
  });

  test("stat, listDirectory, deleteFile", async () => {
    await s.writeTextFile({ path: "st/f.txt", content: "12345" });
    await s.run({ command: "ln -s f.txt st/link && ln -s nowhere st/dangling" });
    assert.deepEqual(await s.stat({ path: "st/f.txt" }), { type: "file", size: 5 });
    assert.equal((await s.stat({ path: "st" }))?.type, "directory");
    assert.deepEqual(await s.stat({ path: "st/link" }), { type: "file", size: 5 }, "symlinks are followed");
    assert.equal(await s.stat({ path: "st/dangling" }), null);
    assert.equal(await s.stat({ path: "st/none" }), null);
    assert.deepEqual(await s.stat({ path: "/dev/null" }), { type: "other", size: 0 });

    const entries = (await s.listDirectory({ path: "st" }))!.map((e) => `${e.name}:${e.type}`).sort();
    assert.deepEqual(entries, ["dangling:symlink", "f.txt:file", "link:symlink"]);
    assert.equal(await s.listDirectory({ path: "no-such-dir" }), null);
    await assert.rejects(s.listDirectory({ path: "st/f.txt" }), /Not a directory/);

    assert.equal(await s.deleteFile({ path: "st/link" }), true);
    assert.equal((await s.stat({ path: "st/f.txt" }))?.type, "file", "deleting a link keeps its target");
    assert.equal(await s.deleteFile({ path: "st/f.txt" }), true);
    assert.equal(await s.deleteFile({ path: "st/f.txt" }), false);
    await assert.rejects(s.deleteFile({ path: "st" }), /is a directory/);
  });

  test("file calls honour abortSignal", async () => {
    const ctl = new AbortController();
    ctl.abort(new Error("aborted early"));
    for (const call of [
      () => s.readFile({ path: "x", abortSignal: ctl.signal }),
      () => s.writeTextFile({ path: "x", content: "x", abortSignal: ctl.signal }),
      () => s.stat({ path: "x", abortSignal: ctl.signal }),
      () => s.listDirectory({ path: ".", abortSignal: ctl.signal }),
      () => s.deleteFile({ path: "x", abortSignal: ctl.signal }),
    ])
      await assert.rejects(call(), /aborted early/);
    // A stream that never ends, aborted mid-upload: no file appears.
    // Aborted once the upload is under way (50 KiB taken from the stream); then, once sandlotd
    // has ended the request (its log says so), the file is not there.
    const puts = () => fs.readFileSync(d.logPath, "utf8").split("\n")
      .filter((l) => l.includes(`method=PUT path="/v1/sandboxes/${sb.id}/files"`)).length;
    const putsBefore = puts();
    const ctl2 = new AbortController();
    let pulled = 0;
    const endless = new ReadableStream<Uint8Array>({
      pull: async (c) => {
        await sleep(20); // the stream's own pace
        c.enqueue(new Uint8Array(1024));
        if (++pulled === 50) ctl2.abort(new Error("upload cancelled"));
      },
    });
    await assert.rejects(s.writeFile({ path: "endless.bin", content: endless, abortSignal: ctl2.signal }), /upload cancelled/);
    assert.ok(await waitFor(async () => puts() > putsBefore, 10_000), "sandlotd never ended the upload");
    assert.equal(await s.stat({ path: "endless.bin" }), null);
  });

  test("a ToolLoopAgent with a mock model runs commands and moves files through the session", async () => {
    const usage = { inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 5, text: 5, reasoning: 0 } };
    const call = (id: string, name: string, input: unknown) => ({ type: "tool-call" as const, toolCallId: id, toolName: name, input: JSON.stringify(input) });
    const steps: LanguageModelV4GenerateResult[] = [
      { content: [call("c1", "writeFile", { path: "data/nums.txt", content: "3\n4\n5\n" })], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] },
      { content: [call("c2", "bash", { command: "awk '{s+=$1} END {print s}' data/nums.txt > data/sum.txt && cat data/sum.txt" })], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] },
      { content: [call("c3", "readFile", { path: "data/sum.txt" }), call("c4", "readFile", { path: "data/none.txt" })], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] },
      { content: [{ type: "text", text: "The sum is 12." }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] },
    ] as LanguageModelV4GenerateResult[];
    let n = 0;
    const model = new MockLanguageModelV4({ doGenerate: async () => steps[n++]! });

    const sandboxOf = (o: { experimental_sandbox?: Experimental_SandboxSession }) => {
      if (!o.experimental_sandbox) throw new Error("no sandbox in the tool options");
      return o.experimental_sandbox;
    };
    const agent = new ToolLoopAgent({
      model,
      instructions: s.description,
      tools: {
        bash: tool({
          description: "Run a shell command in the sandbox",
          inputSchema: z.object({ command: z.string() }),
          execute: async ({ command }, o) => sandboxOf(o).run({ command, abortSignal: o.abortSignal }),
        }),
        writeFile: tool({
          description: "Write a text file in the sandbox",
          inputSchema: z.object({ path: z.string(), content: z.string() }),
          execute: async ({ path, content }, o) => {
            await sandboxOf(o).writeTextFile({ path, content, abortSignal: o.abortSignal });
            return { written: path };
          },
        }),
        readFile: tool({
          description: "Read a text file from the sandbox",
          inputSchema: z.object({ path: z.string() }),
          execute: async ({ path }, o) => ({ content: await sandboxOf(o).readTextFile({ path, abortSignal: o.abortSignal }) }),
        }),
      },
    });
    const result = await agent.generate({ prompt: "Sum the numbers 3, 4 and 5 in the sandbox.", experimental_sandbox: s });
    assert.equal(result.text, "The sum is 12.");
    const outputs = result.steps.flatMap((st) => st.toolResults.map((r) => [r.toolName, r.output]));
    assert.deepEqual(outputs, [
      ["writeFile", { written: "data/nums.txt" }],
      ["bash", { exitCode: 0, stdout: "12\n", stderr: "" }],
      ["readFile", { content: "12\n" }],
      ["readFile", { content: null }],
    ]);
    assert.equal(text(await sb.readFile("/home/user/work/data/sum.txt")), "12\n");
    assert.match(JSON.stringify(model.doGenerateCalls[0]!.prompt), /sandlot sandbox/);
  });
});

describe("AI SDK harness sandbox provider", { skip }, () => {
  let d: Daemon;

  before(async () => {
    d = await new Daemon().start();
  });

  after(async () => {
    const problems = await d.stop();
    assert.deepEqual(problems, [], problems.join("\n"));
  });

  test("createSession / stop / resumeSession / destroy", async () => {
    const provider = sandlotHarnessProvider({ client: d.client, create: { memory: "256M" } });
    assert.equal(provider.specificationVersion, "harness-sandbox-v1");
    let firstCreate = 0;
    const session = await provider.createSession({
      sessionId: "chat-42", identity: "recipe-1",
      onFirstCreate: async (sess) => {
        firstCreate++;
        await sess.writeTextFile({ path: ".bootstrap/ready", content: "yes" });
      },
    });
    assert.equal(firstCreate, 1);
    assert.match(session.id, /^sb-/);
    assert.equal(session.defaultWorkingDirectory, "/home/user");
    assert.deepEqual(session.ports, []);
    await assert.rejects(async () => session.getPortEndpoint({ port: 3000 }), (e: unknown) =>
      HarnessCapabilityUnsupportedError.isInstance(e) && e instanceof HarnessCapabilityUnsupportedError &&
      /does not expose port 3000/.test(e.message) &&
      e.cause instanceof SandlotError && e.cause.code === "port_not_exposed");
    await assert.rejects(async () => session.setNetworkPolicy!({ mode: "proxy-only" } as unknown as HarnessV1NetworkPolicy),
      (e: unknown) => HarnessCapabilityUnsupportedError.isInstance(e) && /unknown network policy mode "proxy-only"/.test((e as Error).message));
    await session.setNetworkPolicy!({ mode: "custom", allowedHosts: ["api.example.test"], allowedCIDRs: ["203.0.113.0/24"],
      deniedCIDRs: ["203.0.113.7"] });
    assert.deepEqual((await d.client.info(session.id)).options.network,
      { mode: "allowlist", allow: ["api.example.test", "203.0.113.0/24"], deny: ["203.0.113.7/32"] });
    await session.setNetworkPolicy!({ mode: "allow-all" });
    assert.equal((await d.client.info(session.id)).options.network.mode, "open");
    await session.setNetworkPolicy!({ mode: "deny-all" });
    assert.equal((await d.client.info(session.id)).options.network.mode, "none");
    assert.deepEqual(sandlotNetworkPolicy({ mode: "custom", allowedHosts: ["*.x.test"] }),
      { mode: "allowlist", allow: ["*.x.test"], deny: [] });
    const info = await d.client.info(session.id);
    assert.equal(info.metadata[HARNESS_SESSION_LABEL], "chat-42");
    assert.equal(info.auto_resume, true);

    await session.stop();
    assert.equal((await d.client.info(session.id)).state, "paused");
    await session.stop(); // idempotent

    const again = await provider.resumeSession!({ sessionId: "chat-42" });
    assert.equal(again.id, session.id);
    assert.equal((await d.client.info(session.id)).state, "running");
    assert.equal(await again.restricted().readTextFile({ path: ".bootstrap/ready" }), "yes");
    assert.equal((await again.run({ command: "cat .bootstrap/ready" })).stdout, "yes");

    await again.destroy();
    await again.destroy(); // idempotent
    assert.equal((await d.client.info(session.id)).state, "deleted");
    await assert.rejects(async () => provider.resumeSession!({ sessionId: "chat-42" }),
      (e: unknown) => e instanceof SandlotError && e.code === "not_found" && /chat-42/.test(e.message));
    await assert.rejects(async () => provider.resumeSession!({ sessionId: "" }), /needs a sessionId/);
  });

  test("resumeSession after an expiry re-creates the sandbox with its files", async () => {
    const provider = sandlotHarnessProvider({ client: d.client });
    const session = await provider.createSession({ sessionId: "chat-exp" });
    await session.writeTextFile({ path: "work.txt", content: "survives" });
    await d.client.sandbox(session.id).keepalive({ ttl_seconds: 1 }); // expire it now
    for (let i = 0; i < 60 && (await d.client.info(session.id)).state === "running"; i++) await sleep(100);
    const old = await d.client.info(session.id);
    assert.equal(old.state, "expired");
    assert.equal(old.workspace_kept, true);
    const back = await provider.resumeSession!({ sessionId: "chat-exp", abortSignal: AbortSignal.timeout(30_000) });
    assert.notEqual(back.id, session.id);
    assert.equal(await back.readTextFile({ path: "work.txt" }), "survives");
    assert.equal((await d.client.info(back.id)).metadata[HARNESS_SESSION_LABEL], "chat-exp");
    // the old sandbox's kept workspace is released, not held for the retention period
    assert.notEqual((await d.client.info(session.id)).workspace_kept, true);
    await back.destroy();
  });

  test("ports, getPortEndpoint, setPorts: a server inside reached from here", async () => {
    const provider = sandlotHarnessProvider({ client: d.client, create: { memory: "256M", ports: [8000] } });
    const session = await provider.createSession({ sessionId: "chat-ports" });
    assert.deepEqual(session.ports, [8000]);
    await session.writeTextFile({ path: "site/index.html", content: "<p>from inside</p>" });
    await session.run({ command: "cd site && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)" });
    // A unix-socket client gets the port's own URL on the host.
    const ep = await session.getPortEndpoint({ port: 8000 });
    assert.match(ep.url, /^http:\/\/127\.0\.0\.1:\d+\/$/);
    assert.equal(ep.headers, undefined);
    let body = "";
    assert.ok(await waitFor(async () => {
      try {
        // A deadline on each try: a fetch that met the relay's reset while
        // connecting was seen to never settle (Node 20), which hung the suite.
        const r = await fetch(ep.url + "index.html", { signal: AbortSignal.timeout(2000) });
        body = await r.text();
        return r.status === 200;
      } catch {
        return false;
      }
    }, 10_000), "the server inside never answered");
    assert.equal(body, "<p>from inside</p>");
    assert.equal(await session.getPortUrl({ port: 8000 }), ep.url);
    assert.match((await session.getPortEndpoint({ port: 8000, protocol: "ws" })).url, /^ws:\/\/127\.0\.0\.1:/);
    // setPorts replaces the set: kept ports keep their URL, dropped ones close.
    await session.setPorts!([9000, 8000]);
    assert.deepEqual([...session.ports].sort(), [8000, 9000]);
    assert.equal((await session.getPortEndpoint({ port: 8000 })).url, ep.url);
    await session.setPorts!([9000]);
    assert.deepEqual(session.ports, [9000]);
    await assert.rejects(fetch(ep.url + "index.html"));
    await assert.rejects(async () => session.getPortEndpoint({ port: 8000 }),
      (e: unknown) => HarnessCapabilityUnsupportedError.isInstance(e) && /port 8000 is not exposed/.test((e as Error).message));
    await assert.rejects(async () => session.setPorts!([0]), (e: unknown) => e instanceof SandlotError && e.status === 400);
    await session.destroy();
  });

  test("over TCP, getPortEndpoint is the API's proxy with the token header", async () => {
    const token = "ts-ports-" + Math.random().toString(36).slice(2) + "-token";
    const tokenFile = path.join(d.base, "token");
    fs.writeFileSync(tokenFile, token + "\n");
    const port = await freePort();
    const tcp = await new Daemon(["--listen", `tcp:127.0.0.1:${port}`, "--token-file", tokenFile]).start();
    try {
      const client = new Sandlot({ url: `http://127.0.0.1:${port}`, token });
      const provider = sandlotHarnessProvider({ client, create: { memory: "256M", ports: [8000] } });
      const session = await provider.createSession({ sessionId: "chat-tcp" });
      await session.writeTextFile({ path: "site/index.html", content: "via the proxy" });
      await session.run({ command: "cd site && (python3 -m http.server 8000 >/dev/null 2>&1 &)" });
      const ep = await session.getPortEndpoint({ port: 8000 });
      assert.equal(ep.url, `http://127.0.0.1:${port}/v1/sandboxes/${session.id}/ports/8000/`);
      assert.deepEqual(ep.headers, { Authorization: `Bearer ${token}` });
      let body = "";
      assert.ok(await waitFor(async () => {
        const r = await fetch(ep.url + "index.html", { headers: ep.headers });
        body = await r.text();
        return r.status === 200;
      }, 10_000), `the proxy never reached the server: ${body}`);
      assert.equal(body, "via the proxy");
      assert.equal((await fetch(ep.url + "index.html")).status, 401); // no token, no way in
      assert.match((await session.getPortEndpoint({ port: 8000, protocol: "ws" })).url, /^ws:\/\/127\.0\.0\.1:/);
      await session.destroy();

      // A wrong or missing token: the harness's authentication error, for
      // createSession and resumeSession alike, with sandlotd's answer as its cause.
      for (const bad of [new Sandlot({ url: `http://127.0.0.1:${port}`, token: "not-" + token }),
        new Sandlot({ url: `http://127.0.0.1:${port}`, token: "" })]) {
        const p = sandlotHarnessProvider({ client: bad });
        const isAuth = (e: unknown) => HarnessSandboxAuthenticationError.isInstance(e) &&
          e instanceof HarnessSandboxAuthenticationError && e.sandboxProviderId === "sandlot" &&
          /sandlotd refused the credentials .*unauthorized, HTTP 401.*SANDLOT_TOKEN/.test(e.message) &&
          e.cause instanceof SandlotError && e.cause.status === 401;
        await assert.rejects(async () => p.createSession({ sessionId: "chat-auth" }), isAuth);
        await assert.rejects(async () => p.resumeSession!({ sessionId: "chat-tcp" }), isAuth);
        bad.close();
      }
      assert.deepEqual(await client.list({ labels: { [HARNESS_SESSION_LABEL]: "chat-auth" }, state: "all" }), []);
      client.close();
    } finally {
      const problems = await tcp.stop();
      assert.deepEqual(problems, [], problems.join("\n"));
    }
  });

  test("a failing onFirstCreate deletes the new sandbox", async () => {
    const provider = sandlotHarnessProvider({ client: d.client });
    await assert.rejects(async () => provider.createSession({
      sessionId: "chat-bad", onFirstCreate: async () => { throw new Error("bootstrap failed"); },
    }), /bootstrap failed/);
    const left = await d.client.list({ labels: { [HARNESS_SESSION_LABEL]: "chat-bad" } });
    assert.deepEqual(left, []);
  });
});
