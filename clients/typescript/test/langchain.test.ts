/** The LangChain code-execution middleware against a real sandlotd. */
import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import { createAgent, AIMessage, ToolMessage, type BaseMessage } from "langchain";
import { fakeModel } from "@langchain/core/testing";
import { SandlotError } from "sandlot";
import { sandlotMiddleware, SandlotSandboxManager, type GeneratedFile } from "sandlot/langchain";
import { Daemon, skipReason, sleep } from "./daemon.js";

const skip = skipReason();
const str = (b?: Uint8Array) => (b ? Buffer.from(b).toString("utf8") : undefined);

function toolOutputs(messages: BaseMessage[]): Map<string, string> {
  return new Map(messages.filter((m): m is ToolMessage => ToolMessage.isInstance(m))
    .map((m) => [m.tool_call_id, typeof m.content === "string" ? m.content : JSON.stringify(m.content)]));
}

/** Forces the sandbox to expire (TTL of 1 s from now) and waits until it has. */
async function expire(d: Daemon, id: string) {
  await d.client.sandbox(id).keepalive({ ttl_seconds: 1 });
  for (let i = 0; i < 60; i++) {
    if ((await d.client.info(id)).state === "expired") return;
    await sleep(100);
  }
  throw new Error(`sandbox ${id} did not expire`);
}

describe("LangChain sandlot middleware", { skip }, () => {
  let d: Daemon;

  before(async () => {
    d = await new Daemon().start();
  });

  after(async () => {
    const problems = await d.stop();
    assert.deepEqual(problems, [], problems.join("\n"));
  });

  test("lazy sandbox, user files uploaded, tools, generated files collected, re-created after expiry", async () => {
    const seen: GeneratedFile[][] = [];
    const mw = sandlotMiddleware({
      client: d.client,
      create: { metadata: { suite: "langchain" } },
      files: [{ path: "input/prices.csv", content: "item,price\napple,3\npear,4\n" }],
      onGeneratedFiles: (f) => { seen.push(f); },
    });
    const model = fakeModel()
      .respond(new AIMessage("Hello, nothing to run."))
      .respondWithTools([{ name: "execute", args: { command: "python3 -c \"import csv; r=list(csv.DictReader(open('input/prices.csv'))); open('total.txt','w').write(str(sum(int(x['price']) for x in r)))\" && cat total.txt" }, id: "e1" }])
      .respondWithTools([{ name: "write_file", args: { path: "notes/summary.md", content: "# Total\n7\n" }, id: "w1" }])
      .respond(new AIMessage("The total is 7."))
      // second invocation, after the sandbox has expired:
      .respondWithTools([{ name: "execute", args: { command: "cat total.txt; echo; cat notes/summary.md input/prices.csv; echo again > again.txt" }, id: "e2" }])
      .respondWithTools([{ name: "read_file", args: { path: "/home/user/notes/summary.md" }, id: "r1" }, { name: "read_file", args: { path: "missing.txt" }, id: "r2" }])
      .respond(new AIMessage("Done again."));
    const agent = createAgent({ model, tools: [], middleware: [mw] });

    // No tool call: no sandbox.
    const r0 = await agent.invoke({ messages: [{ role: "user", content: "hi" }] });
    assert.equal(r0.messages.at(-1)?.content, "Hello, nothing to run.");
    assert.equal(mw.manager.sandbox, undefined);
    assert.deepEqual(await d.client.list({ labels: { suite: "langchain" } }), []);

    const r1 = await agent.invoke({ messages: [{ role: "user", content: "total the prices" }] });
    const out1 = toolOutputs(r1.messages);
    assert.equal(out1.get("e1"), "7\n[exit code 0]");
    assert.match(out1.get("w1") ?? "", /Wrote 10 bytes to \/home\/user\/notes\/summary\.md/);
    const first = mw.manager.sandbox!;
    assert.ok(first);
    assert.deepEqual(mw.manager.generatedFiles().map((f) => [f.path, str(f.content)]).sort(), [
      ["/home/user/notes/summary.md", "# Total\n7\n"],
      ["/home/user/total.txt", "7"],
    ]);
    // The user's own file is not reported as generated; the state lists the generated ones.
    assert.deepEqual((r1.sandlot_files as Array<{ path: string }>).map((f) => f.path).sort(),
      ["/home/user/notes/summary.md", "/home/user/total.txt"]);
    assert.deepEqual(seen.flat().map((f) => f.path).sort(), ["/home/user/notes/summary.md", "/home/user/total.txt"]);
    assert.equal(seen.flat().find((f) => f.path.endsWith("total.txt"))?.source.startsWith("ex-"), true);

    await expire(d, first.id);
    assert.equal((await d.client.info(first.id)).workspace_kept, true, "an expired sandbox keeps its workspace");

    const r2 = await agent.invoke({ messages: [{ role: "user", content: "again" }] });
    const out2 = toolOutputs(r2.messages);
    assert.equal(out2.get("e2"), "7\n# Total\n7\nitem,price\napple,3\npear,4\n[exit code 0]",
      "user and generated files are back in the new sandbox");
    assert.equal(out2.get("r1"), "# Total\n7\n");
    assert.equal(out2.get("r2"), "Error: no such file: /home/user/missing.txt");
    assert.equal(mw.manager.recreations, 1);
    const second = mw.manager.sandbox!;
    assert.notEqual(second.id, first.id);
    // the expired sandbox's kept workspace is released, not held for the retention period
    assert.equal((await d.client.info(first.id)).workspace_kept, false);
    assert.ok(mw.manager.generatedFiles().some((f) => f.path === "/home/user/again.txt" && f.sandboxId === second.id));
    assert.ok(!mw.manager.generatedFiles().some((f) => f.path.startsWith("/home/user/input/")));

    await mw.manager.close();
    assert.deepEqual(await d.client.list({ labels: { suite: "langchain" } }), []);
  });

  test("manager: tool caches are not generated files unless includeHiddenFiles", async () => {
    const make = "mkdir -p .cache/fontconfig __pycache__ out && echo c > .cache/fontconfig/f.cache-9 && " +
      "echo p > __pycache__/m.pyc && echo r > out/plot.txt && echo t > tmp.txt && rm tmp.txt";
    const m = new SandlotSandboxManager({ client: d.client });
    await (await m.ensure()).exec(make);
    assert.deepEqual((await m.collect()).map((f) => [f.path, f.kind]), [["/home/user/out/plot.txt", "created"]]);
    await m.close();
    const all = new SandlotSandboxManager({ client: d.client, includeHiddenFiles: true });
    await (await all.ensure()).exec(make);
    assert.deepEqual((await all.collect()).map((f) => f.path).sort(), [
      "/home/user/.cache/fontconfig/f.cache-9", "/home/user/__pycache__/m.pyc", "/home/user/out/plot.txt"]);
    await all.close();
  });

  test("a matplotlib plot: the plot is generated, ~/.cache is neither reported nor re-uploaded after expiry", async () => {
    const plot = "python3 -c \"import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt; " +
      "plt.plot([1, 3, 2]); plt.savefig('out/plot.png')\"";
    const caches = "find /home/user/.cache -type f | sort";
    const mw = sandlotMiddleware({ client: d.client });
    const model = fakeModel()
      .respondWithTools([{ name: "execute", args: { command: `mkdir -p out && ${plot} && ${caches}` }, id: "p1" }])
      .respond(new AIMessage("Plotted."))
      .respondWithTools([{ name: "execute", args: { command: "find /home/user -mindepth 1 | sort" }, id: "p2" }])
      .respond(new AIMessage("Listed."));
    const agent = createAgent({ model, tools: [], middleware: [mw] });
    const r1 = await agent.invoke({ messages: [{ role: "user", content: "plot it" }] });
    const made = toolOutputs(r1.messages).get("p1") ?? "";
    // matplotlib did write its caches (else this test would prove nothing) ...
    assert.match(made, /^\/home\/user\/\.cache\/fontconfig\/.*\.cache-\d+$/m, made);
    assert.match(made, /^\/home\/user\/\.cache\/matplotlib\/fontlist-v\d+\.json$/m, made);
    // ... and only the plot is a generated file.
    assert.deepEqual((r1.sandlot_files as Array<{ path: string }>).map((f) => f.path), ["/home/user/out/plot.png"]);
    const png = mw.manager.generatedFiles()[0]!;
    assert.deepEqual([...png.content!.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);

    const first = mw.manager.sandbox!;
    await expire(d, first.id);
    assert.equal((await d.client.info(first.id)).workspace_kept, true, "an expired sandbox keeps its workspace");
    const r2 = await agent.invoke({ messages: [{ role: "user", content: "what is there now?" }] });
    assert.equal(toolOutputs(r2.messages).get("p2"), "/home/user/out\n/home/user/out/plot.png\n[exit code 0]",
      "the new sandbox has the plot and no tool caches");
    assert.equal(mw.manager.recreations, 1);
    // The old sandbox's kept workspace went at once, not after the retention period.
    const old = await d.client.info(first.id);
    assert.equal(old.workspace_kept, false, JSON.stringify(old));
    await mw.manager.close();

    // includeHiddenFiles: the caches are collected too.
    const all = new SandlotSandboxManager({ client: d.client, includeHiddenFiles: true });
    await (await all.ensure()).exec(`mkdir -p out && ${plot}`);
    const paths = (await all.collect()).map((f) => f.path);
    assert.ok(paths.includes("/home/user/out/plot.png"), paths.join(" "));
    assert.ok(paths.some((p) => /^\/home\/user\/\.cache\/matplotlib\/fontlist-v\d+\.json$/.test(p)), paths.join(" "));
    await all.close();
  });

  test("execute: the timeout is the tool description's, set per middleware", async () => {
    const execute = (mw: ReturnType<typeof sandlotMiddleware>) => mw.tools!.find((t) => t.name === "execute")!;
    const dflt = sandlotMiddleware({ client: d.client });
    assert.match(execute(dflt).description, /still running after 300 seconds is killed/);
    const short = sandlotMiddleware({ client: d.client, timeoutMs: 1500 });
    assert.match(execute(short).description, /still running after 1\.5 seconds is killed/);
    const out = await execute(short).invoke({ command: "echo started; sleep 30" });
    assert.match(String(out), /^started\n\[killed after the 1500 ms timeout\]$/);
    await short.manager.close();
  });

  test("manager: forced expiry and deletion re-create the sandbox with user and generated files", async () => {
    const m = new SandlotSandboxManager({ client: d.client, files: [{ path: "u.txt", content: "user" }] });
    assert.equal(m.sandbox?.id, undefined);
    const sb1 = await m.ensure();
    assert.equal(await sb1.readText("u.txt"), "user");
    assert.deepEqual(await m.collect(), [], "uploads of tracked files are not generated files");
    await sb1.exec("echo gen > gen.txt; mkdir -p d && echo x > d/x.txt");
    assert.deepEqual((await m.collect()).map((f) => f.path).sort(), ["/home/user/d/x.txt", "/home/user/gen.txt"]);
    await sb1.exec("rm -r d");
    await m.collect();
    assert.deepEqual(m.generatedFiles().map((f) => f.path), ["/home/user/gen.txt"], "deleted files are dropped");

    await expire(d, sb1.id);
    assert.equal((await d.client.info(sb1.id)).workspace_kept, true);
    const listing = await m.withSandbox((sb) => sb.exec("ls -1 /home/user; cat gen.txt u.txt"));
    assert.equal(listing.stdout, "gen.txt\nu.txt\ngen\nuser");
    assert.equal(m.recreations, 1);
    const sb2 = m.sandbox!;
    assert.notEqual(sb2.id, sb1.id);

    await sb2.delete(); // deleted from outside: the same path
    await m.addFiles([{ path: "/home/user/late.txt", content: new Uint8Array([1, 2, 3]) }]);
    assert.equal(m.recreations, 2);
    const sb3 = m.sandbox!;
    assert.deepEqual([...(await sb3.readFile("late.txt"))], [1, 2, 3]);
    assert.equal(await sb3.readText("gen.txt"), "gen\n");

    await sb3.pause(); // paused (without auto_resume): resumed, not re-created
    assert.equal((await m.withSandbox((sb) => sb.readText("u.txt"))), "user");
    assert.equal(m.recreations, 2);
    assert.equal(m.sandbox?.id, sb3.id);

    await m.close();
    // re-creating released the expired sandbox's kept workspace
    assert.equal((await d.client.info(sb1.id)).workspace_kept, false);
  });

  test("concurrent tool calls on a fresh manager share one sandbox; errors stay errors", async () => {
    const m = new SandlotSandboxManager({ client: d.client });
    const ids = await Promise.all([1, 2, 3, 4].map(() => m.withSandbox(async (sb) => sb.id)));
    assert.equal(new Set(ids).size, 1);
    await assert.rejects(m.withSandbox((sb) => sb.list("nope")), (e: unknown) => e instanceof SandlotError && e.status === 404);
    assert.equal(m.recreations, 0, "a missing path is not a missing sandbox");
    assert.throws(() => new SandlotSandboxManager({ client: d.client, files: [{ path: "", content: "x" }] }), /non-empty/);
    await m.close();
    const bad = new SandlotSandboxManager({ client: d.client, create: { memory: "nonsense" } });
    await assert.rejects(bad.ensure(), (e: unknown) => e instanceof SandlotError && e.status === 400 && /memory/.test(e.message));
  });
});
