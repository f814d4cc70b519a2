/**
 * A real sandlotd for the tests: started on a unix socket in a temporary
 * directory with its own data dir, stopped with SIGTERM afterwards, and
 * checked for leftovers (sandboxes, processes, loop devices, cgroups).
 * Needs root and a built tree (`make`); SANDLOT_TEST_BIN_DIR points at
 * another build.
 */
import { spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { Sandlot } from "sandlot";

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(here, "../../..");
export const BIN_DIR = path.resolve(process.env.SANDLOT_TEST_BIN_DIR || path.join(REPO, "build/bin"));
const SANDLOTD = path.join(BIN_DIR, "sandlotd");

/** Why the daemon tests cannot run here, or undefined if they can. */
export function skipReason(): string | undefined {
  if (process.getuid?.() !== 0) return "sandlotd needs root (uid maps, cgroups, loop devices): run the tests as root";
  return undefined;
}

export class Daemon {
  readonly base: string;
  readonly socket: string;
  readonly dataDir: string;
  readonly logPath: string;
  proc?: ChildProcess;
  client!: Sandlot;

  constructor(readonly extraArgs: string[] = []) {
    this.base = fs.mkdtempSync(path.join("/var/tmp", "sandlot-ts-"));
    this.socket = path.join(this.base, "sandlot.sock");
    this.dataDir = path.join(this.base, "data");
    this.logPath = path.join(this.base, "sandlotd.log");
  }

  async start(timeoutMs = 10_000): Promise<this> {
    if (!fs.existsSync(SANDLOTD)) throw new Error(`not built: ${SANDLOTD} (run \`make\` first)`);
    const log = fs.openSync(this.logPath, "a");
    this.proc = spawn(SANDLOTD, ["--listen", `unix:${this.socket}`, "--data-dir", this.dataDir, ...this.extraArgs],
      { stdio: ["ignore", log, log] });
    fs.closeSync(log);
    this.client = new Sandlot({ socketPath: this.socket });
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (this.proc.exitCode !== null) throw new Error(`sandlotd exited with ${this.proc.exitCode}:\n${this.logs()}`);
      try {
        if ((await this.client.health()).status === "ok") return this;
      } catch {
        /* not up yet */
      }
      await sleep(20);
    }
    throw new Error(`sandlotd not healthy after ${timeoutMs} ms:\n${this.logs()}`);
  }

  logs(): string {
    try {
      return fs.readFileSync(this.logPath, "utf8").slice(-5000);
    } catch {
      return "";
    }
  }

  /** Ids of every sandbox this daemon created (from its log). */
  createdIds(): string[] {
    const text = fs.existsSync(this.logPath) ? fs.readFileSync(this.logPath, "utf8") : "";
    return [...new Set([...text.matchAll(/event=created sandbox=(sb-[a-z2-7]{26})/g)].map((m) => m[1]!))];
  }

  /** SIGKILL the sandlot-init of sandbox id (its pid is in the "created" log line). */
  killInit(id: string): void {
    const text = fs.readFileSync(this.logPath, "utf8");
    const m = new RegExp(`event=created sandbox=${id} .*?init_pid=(\\d+)`).exec(text);
    if (!m) throw new Error(`no created line for ${id}`);
    process.kill(Number(m[1]), "SIGKILL");
  }

  /**
   * Checks that the tests left no running sandbox, stops the daemon
   * (SIGTERM, exit 0 expected), and returns the leftovers found on the host.
   */
  async stop(): Promise<string[]> {
    const problems: string[] = [];
    if (!this.proc) return problems;
    try {
      const left = await this.client.list({ state: "running" });
      for (const s of left) problems.push(`sandbox ${s.id} still running at the end (metadata ${JSON.stringify(s.metadata)})`);
      const paused = await this.client.list({ state: "paused" });
      for (const s of paused) problems.push(`sandbox ${s.id} still paused at the end`);
    } catch (e) {
      problems.push(`could not list sandboxes: ${(e as Error).message}`);
    }
    this.client.close();
    const proc = this.proc;
    this.proc = undefined;
    const code = await new Promise<number | null>((resolve) => {
      if (proc.exitCode !== null) return resolve(proc.exitCode);
      const t = setTimeout(() => {
        proc.kill("SIGKILL");
        problems.push(`sandlotd ignored SIGTERM for 20 s`);
      }, 20_000);
      proc.once("exit", (c) => {
        clearTimeout(t);
        resolve(c);
      });
      proc.kill("SIGTERM");
    });
    if (code !== 0) problems.push(`sandlotd exited with ${code} on SIGTERM:\n${this.logs()}`);
    // Inits are reaped and loop devices detached asynchronously; the
    // storage pool's device once nothing holds its filesystem any more: a
    // sandbox starting elsewhere copies the mount and detaches its copy
    // lazily, which on a loaded shared host took over 10 s (the integration
    // suite's check waits 30 s too).
    const deadline = Date.now() + 30_000;
    let found = hostLeftovers(this.dataDir, this.createdIds());
    while (found.length && Date.now() < deadline) {
      await sleep(100);
      found = hostLeftovers(this.dataDir, this.createdIds());
    }
    problems.push(...found);
    const ws = path.join(this.dataDir, "workspaces");
    if (fs.existsSync(ws)) for (const f of fs.readdirSync(ws)) problems.push(`workspace image left: ${ws}/${f}`);
    fs.rmSync(this.base, { recursive: true, force: true });
    return problems;
  }
}

function read(p: string): string | undefined {
  try {
    return fs.readFileSync(p, "utf8");
  } catch {
    return undefined;
  }
}

function ppid(pid: number): number {
  const m = /^PPid:\s*(\d+)/m.exec(read(`/proc/${pid}/status`) ?? "");
  return m ? Number(m[1]) : 0;
}

function isOurDescendant(pid: number): boolean {
  const seen = new Set<number>();
  while (pid > 1 && !seen.has(pid)) {
    seen.add(pid);
    pid = ppid(pid);
    if (pid === process.pid) return true;
  }
  return false;
}

/** Whether some mount namespace still mounts block device `dev` (loopN):
 * the mount source, after " - FSTYPE " in mountinfo (btrfs shows an
 * anonymous device number in the major:minor field). */
function mountedSomewhere(dev: string): boolean {
  const seen = new Set<string>();
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    let ns: string;
    try {
      ns = fs.readlinkSync(`/proc/${name}/ns/mnt`);
    } catch {
      continue;
    }
    if (seen.has(ns)) continue;
    seen.add(ns);
    const text = read(`/proc/${name}/mountinfo`) ?? "";
    if (text.split("\n").some((ln) => (ln.split(" - ")[1] ?? "").split(" ")[1] === `/dev/${dev}`)) return true;
  }
  return false;
}

/** Loop devices on the data dir, our sandlot-inits, cgroups of our sandbox ids.
 * The storage pool's loop device (storage/pool.img) counts once no mount
 * namespace mounts it any more: the daemon unmounts the pool on a clean
 * stop, but a namespace that someone made while it was mounted holds a
 * copy (and so the device) until it goes. */
export function hostLeftovers(dataDir: string, ids: string[]): string[] {
  const out: string[] = [];
  for (const dev of fs.readdirSync("/sys/block").filter((d) => d.startsWith("loop"))) {
    const bf = read(`/sys/block/${dev}/loop/backing_file`)?.trim();
    if (!bf || !bf.startsWith(dataDir)) continue;
    if (bf.startsWith(path.join(dataDir, "storage", "pool.img")) && mountedSomewhere(dev)) {
      const ours = (read("/proc/self/mountinfo") ?? "").includes(path.join(dataDir, "storage", "mnt"));
      if (!ours) continue;
    }
    out.push(`loop device /dev/${dev} still backed by ${bf}`);
  }
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const argv0 = (read(`/proc/${name}/cmdline`) ?? "").split("\0")[0] ?? "";
    if (path.basename(argv0) === "sandlot-init" && isOurDescendant(Number(name)))
      out.push(`sandlot-init pid ${name} still running`);
  }
  const roots = ["/sys/fs/cgroup/sandlot", ...safeReaddir("/sys/fs/cgroup").map((c) => `/sys/fs/cgroup/${c}/sandlot`)];
  for (const id of ids)
    for (const r of roots) if (fs.existsSync(path.join(r, id))) out.push(`cgroup left: ${path.join(r, id)}`);
  return out;
}

function safeReaddir(p: string): string[] {
  try {
    return fs.readdirSync(p);
  } catch {
    return [];
  }
}

/** Poll `cond` every 20 ms until it holds or `ms` pass; its last value. */
export async function waitFor(cond: () => Promise<boolean>, ms = 5000): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    if (await cond()) return true;
    if (Date.now() > end) return false;
    await sleep(20);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export async function readStream(s: ReadableStream<Uint8Array>): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  for await (const c of s as unknown as AsyncIterable<Uint8Array>) chunks.push(c);
  return new Uint8Array(Buffer.concat(chunks));
}

export const tmpdir = os.tmpdir;
