/**
 * LangChain (v1) code-execution middleware over sandlot, for
 * `createAgent({ model, middleware: [sandlotMiddleware(...)] })`.
 *
 * - Tools: `execute` (a shell command), `read_file`, `write_file`.
 * - The sandbox is created lazily, on the first tool call, and reused by
 *   every later step and invocation of the agent.
 * - The user's files (option `files`, or `addFiles()`) are uploaded when the
 *   sandbox is created.
 * - After each step the files the code created or modified under /home/user
 *   (sandlot's change tracking, folded by sandlotd: one entry per path) are
 *   downloaded and kept: the application reads them with `generatedFiles()`,
 *   `onGeneratedFiles` is called with the new ones, and the agent state's
 *   `sandlot_files` lists them.  Tool caches and settings (paths with a
 *   component starting with "." such as ~/.cache/matplotlib, or named
 *   __pycache__) are not results and are left out unless
 *   `includeHiddenFiles` is set.
 * - When the sandbox has ended (expired, deleted, its daemon restarted) a new
 *   one is created, the tracked files — the user's and the generated ones —
 *   are uploaded again, and the tool call is retried once.  A paused sandbox
 *   is resumed instead.
 */
import * as posix from "node:path/posix";
import { createMiddleware, tool } from "langchain";
import { z } from "zod";
import { Sandlot, type Sandbox } from "./client.js";
import { SandlotError, isMissingPath } from "./errors.js";
import type { Body } from "./http.js";
import type { ChangeKind, CreateSandboxOptions } from "./types.js";

/** A file to put into the sandbox.  Relative paths are under /home/user. */
export interface InputFile {
  path: string;
  content: string | Uint8Array;
}

/** A file the code created or modified, as collected after a step. */
export interface GeneratedFile {
  /** absolute path in the sandbox */
  path: string;
  kind: Exclude<ChangeKind, "deleted">;
  size: number;
  /** the bytes, or undefined when the file was larger than maxTrackedFileBytes */
  content?: Uint8Array;
  /** exec id that wrote it, or "api" (write_file) */
  source: string;
  /** the sandbox it was collected from */
  sandboxId: string;
}

export interface SandlotSandboxManagerOptions {
  /** Default: a new Sandlot() from the environment. */
  client?: Sandlot;
  /** Options for each sandbox it creates. */
  create?: CreateSandboxOptions;
  /** The user's files, uploaded when the sandbox is created (and re-created). */
  files?: InputFile[];
  /** Generated files larger than this are listed but not kept (nor restored).  Default 10 MiB. */
  maxTrackedFileBytes?: number;
  /** Called with the files each collection found new or changed. */
  onGeneratedFiles?: (files: GeneratedFile[]) => void | Promise<void>;
  /**
   * Also collect (and restore) hidden paths: a component starting with "."
   * (~/.cache/fontconfig, ~/.cache/matplotlib, ~/.config) or named
   * __pycache__.  Default false: those are tool caches, not results.
   */
  includeHiddenFiles?: boolean;
}

/**
 * Owns one sandbox at a time for an agent: creates it on first use, puts
 * the tracked files in, re-creates it when it has ended, and collects what
 * the code generates.  Usable without LangChain.
 */
export class SandlotSandboxManager {
  readonly client: Sandlot;
  private readonly createOptions: CreateSandboxOptions;
  private readonly maxTracked: number;
  private readonly onGenerated?: SandlotSandboxManagerOptions["onGeneratedFiles"];
  private readonly includeHidden: boolean;
  private readonly userFiles = new Map<string, Uint8Array>();
  private readonly generated = new Map<string, GeneratedFile>();
  private current?: Sandbox;
  private pending?: Promise<Sandbox>;
  private cursor = 0;
  private collecting?: Promise<GeneratedFile[]>;
  /** How many times the sandbox was re-created after it had ended. */
  recreations = 0;

  constructor(opts: SandlotSandboxManagerOptions = {}) {
    this.client = opts.client ?? new Sandlot();
    this.createOptions = opts.create ?? {};
    this.maxTracked = opts.maxTrackedFileBytes ?? 10 << 20;
    this.onGenerated = opts.onGeneratedFiles;
    this.includeHidden = opts.includeHiddenFiles ?? false;
    for (const f of opts.files ?? []) this.userFiles.set(absolute(f.path), toBytes(f.content));
  }

  /** The current sandbox, if one was created. */
  get sandbox(): Sandbox | undefined {
    return this.current;
  }

  /** Adds user files: uploaded now if the sandbox exists, else when it is created. */
  async addFiles(files: InputFile[]): Promise<void> {
    for (const f of files) {
      const path = absolute(f.path);
      const bytes = toBytes(f.content);
      this.userFiles.set(path, bytes);
      if (this.current) await this.withSandbox((sb) => sb.writeFile(path, bytes));
    }
    if (this.current) await this.skipOwnChanges(this.current);
  }

  /** The sandbox, created (with the tracked files) on first use. */
  ensure(): Promise<Sandbox> {
    if (this.current) return Promise.resolve(this.current);
    return (this.pending ??= this.start().finally(() => { this.pending = undefined; }));
  }

  private async start(): Promise<Sandbox> {
    const sb = await this.client.create(this.createOptions);
    try {
      // The user's files first, then what earlier sandboxes generated.
      for (const [path, bytes] of this.userFiles) await sb.writeFile(path, bytes);
      for (const f of this.generated.values()) if (f.content) await sb.writeFile(f.path, f.content);
      await this.skipOwnChanges(sb);
    } catch (e) {
      await sb.delete().catch(() => {});
      throw e;
    }
    this.current = sb;
    return sb;
  }

  /** Moves the changes cursor past the uploads the manager itself made. */
  private async skipOwnChanges(sb: Sandbox): Promise<void> {
    this.cursor = (await sb.refresh()).cursor;
  }

  /**
   * Runs `fn` on the sandbox.  If the sandbox has ended, creates a new one
   * with the tracked files and runs `fn` once more; if it is paused,
   * resumes it first.
   */
  async withSandbox<T>(fn: (sb: Sandbox) => Promise<T>): Promise<T> {
    const sb = await this.ensure();
    try {
      return await fn(sb);
    } catch (e) {
      if (!(e instanceof SandlotError)) throw e;
      if (e.code === "sandbox_paused") {
        await sb.resume().catch((r) => { if (!(r instanceof SandlotError && r.status === 409)) throw r; });
        return fn(sb);
      }
      if (!e.sandboxGone) throw e;
      if (this.current === sb) {
        this.current = undefined;
        this.recreations++;
        // An expired sandbox keeps its workspace for the retention period;
        // the tracked files go into the new one, so release it now.
        await sb.delete().catch((r) => { if (!(r instanceof SandlotError)) throw r; });
      }
      return fn(await this.ensure());
    }
  }

  /**
   * Collects the files created or modified under /home/user since the last
   * collection, keeps them (up to maxTrackedFileBytes each) and returns
   * them.  Deleted files are dropped.  Nothing happens before the sandbox
   * exists; a sandbox that ended since is left for the next tool call to
   * re-create.
   */
  collect(): Promise<GeneratedFile[]> {
    // One collection at a time: parallel tool calls end together.
    const run = async () => {
      const sb = this.current;
      if (!sb) return [];
      let page;
      try {
        // sandlotd folds the log: one entry per path, its net effect since the cursor.
        page = await sb.allChanges(this.cursor, { net: true, excludeHidden: !this.includeHidden });
      } catch (e) {
        if (e instanceof SandlotError && (e.sandboxGone || e.code === "sandbox_paused")) return [];
        throw e;
      }
      const files: typeof page.changes = [];
      for (const c of page.changes) {
        if (c.kind === "deleted") {
          for (const p of [...this.generated.keys()]) if (p === c.path || p.startsWith(c.path + "/")) this.generated.delete(p);
        } else if (c.type === "file") {
          files.push(c);
        }
      }
      const found: GeneratedFile[] = [];
      for (const c of files) {
        let content: Uint8Array | undefined;
        let size = c.size;
        if (c.size <= this.maxTracked) {
          try {
            content = await sb.readFile(c.path);
            size = content.length;
          } catch (e) {
            if (isMissingPath(e)) continue; // deleted after the change was recorded
            throw e;
          }
        }
        const f: GeneratedFile = { path: c.path, kind: c.kind as GeneratedFile["kind"], size, content, source: c.source, sandboxId: sb.id };
        this.generated.set(c.path, f);
        found.push(f);
      }
      this.cursor = page.cursor;
      if (found.length && this.onGenerated) await this.onGenerated(found);
      return found;
    };
    const p = (this.collecting ?? Promise.resolve()).then(run, run);
    this.collecting = p.catch(() => []);
    return p;
  }

  /** Every generated file kept so far (latest content per path). */
  generatedFiles(): GeneratedFile[] {
    return [...this.generated.values()];
  }

  /** The user's files as tracked (absolute paths). */
  userFilePaths(): string[] {
    return [...this.userFiles.keys()];
  }

  /** Deletes the current sandbox (tracked files are kept for a later one). */
  async close(): Promise<void> {
    const sb = this.current;
    this.current = undefined;
    if (sb) await sb.delete().catch((e) => { if (!(e instanceof SandlotError && e.sandboxGone)) throw e; });
  }
}

/** "300 seconds", "1.5 seconds", "1 second". */
function timeoutSeconds(ms: number): string {
  const s = ms / 1000;
  return `${s} second${s === 1 ? "" : "s"}`;
}

function absolute(p: string): string {
  if (typeof p !== "string" || p === "") throw new SandlotError(`a file path must be a non-empty string (got ${JSON.stringify(p)})`, { code: "bad_option" });
  return posix.resolve("/home/user", p);
}

function toBytes(c: string | Uint8Array): Uint8Array {
  if (typeof c === "string") return new TextEncoder().encode(c);
  if (c instanceof Uint8Array) return c;
  throw new SandlotError("file content must be a string or a Uint8Array", { code: "bad_option" });
}

export interface SandlotMiddlewareOptions extends SandlotSandboxManagerOptions {
  /** Use this manager (and its sandbox) instead of creating one. */
  manager?: SandlotSandboxManager;
  /** Kill commands of the execute tool after this long (ms); the tool's description tells the model.  Default 300000. */
  timeoutMs?: number;
  /** Characters of output the execute tool returns.  Default 30000. */
  maxOutputChars?: number;
  /** Characters read_file returns.  Default 100000. */
  maxReadChars?: number;
}

const generatedFileState = z.object({ path: z.string(), kind: z.string(), size: z.number(), sandbox_id: z.string() });

/**
 * The middleware.  `middleware.manager` (also returned) gives the
 * application the sandbox and the generated files.
 */
export function sandlotMiddleware(opts: SandlotMiddlewareOptions = {}) {
  const manager = opts.manager ?? new SandlotSandboxManager(opts);
  const timeoutMs = opts.timeoutMs ?? 300_000;
  const maxOut = opts.maxOutputChars ?? 30_000;
  const maxRead = opts.maxReadChars ?? 100_000;

  const execute = tool(async ({ command }: { command: string }) => {
    // "exec 2>&1": one stream, in the order the command wrote it.
    const r = await manager.withSandbox((sb) =>
      sb.exec(["/bin/sh", "-c", `exec 2>&1\n${command}`], { timeout_ms: timeoutMs, output_limit: maxOut * 4 }));
    let out = r.stdout;
    if (out.length > maxOut || r.truncated) out = `${out.slice(0, maxOut)}\n[output truncated]`;
    const status = r.timed_out ? `killed after the ${timeoutMs} ms timeout`
      : r.exit_code !== null ? `exit code ${r.exit_code}` : `killed by signal ${r.signal}`;
    return `${out}${out && !out.endsWith("\n") ? "\n" : ""}${r.error ? r.error + "\n" : ""}[${status}]`;
  }, {
    name: "execute",
    description: "Run a shell command in the sandbox (Linux, /bin/sh, working directory /home/user, python3 and node installed, no network). " +
      `Files persist between calls. A command still running after ${timeoutSeconds(timeoutMs)} is killed. Returns the combined output and the exit code.`,
    schema: z.object({ command: z.string().min(1).describe("the shell command") }),
  });

  const readFile = tool(async ({ path }: { path: string }) => {
    const abs = absolute(path);
    try {
      const text = await manager.withSandbox((sb) => sb.readText(abs));
      return text.length > maxRead ? `${text.slice(0, maxRead)}\n[truncated: ${text.length} characters in all]` : text;
    } catch (e) {
      if (isMissingPath(e)) return `Error: no such file: ${abs}`;
      if (e instanceof SandlotError && e.status === 400) return `Error: ${e.message}`;
      throw e;
    }
  }, {
    name: "read_file",
    description: "Read a text file from the sandbox. Relative paths are under /home/user.",
    schema: z.object({ path: z.string().min(1) }),
  });

  const writeFile = tool(async ({ path, content }: { path: string; content: string }) => {
    const abs = absolute(path);
    try {
      const r = await manager.withSandbox((sb) => sb.writeFile(abs, content as Body));
      return `Wrote ${r.size} bytes to ${r.path}`;
    } catch (e) {
      if (e instanceof SandlotError && !e.sandboxGone && e.status !== undefined && e.status < 500) return `Error: ${e.message}`;
      throw e;
    }
  }, {
    name: "write_file",
    description: "Write a text file in the sandbox (parent directories are created). Relative paths are under /home/user.",
    schema: z.object({ path: z.string().min(1), content: z.string() }),
  });

  const stateOf = async () => {
    await manager.collect();
    return {
      sandlot_files: manager.generatedFiles().map((f) => ({ path: f.path, kind: f.kind, size: f.size, sandbox_id: f.sandboxId })),
    };
  };

  const middleware = createMiddleware({
    name: "SandlotCodeExecution",
    stateSchema: z.object({ sandlot_files: z.array(generatedFileState).default([]) }),
    tools: [execute, readFile, writeFile],
    // A step ends when its tool calls have run: collect before the next model call, and at the end.
    beforeModel: async () => (manager.sandbox ? stateOf() : undefined),
    afterAgent: async () => (manager.sandbox ? stateOf() : undefined),
  });
  return Object.assign(middleware, { manager });
}
