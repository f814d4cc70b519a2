/**
 * Vercel AI SDK (v7) adapters:
 *
 * - `SandlotSandboxSession` implements `Experimental_SandboxSession` from
 *   "ai": pass it as `experimental_sandbox` to `generateText`, `streamText`
 *   or a `ToolLoopAgent`, and tools get it in their execute options.
 * - `sandlotHarnessProvider()` is a `HarnessV1SandboxProvider` for
 *   "@ai-sdk/harness": createSession creates a sandlot sandbox (labelled with
 *   the harness session id), resumeSession finds it again and resumes it.
 *
 * Only types are imported from "ai"; "@ai-sdk/harness" is loaded at run
 * time only for its error classes, when the harness provider throws one
 * (HarnessSandboxAuthenticationError when sandlotd refuses the client's
 * token, HarnessCapabilityUnsupportedError for what sandlot cannot do), so
 * the session alone needs only "ai".
 */
import * as posix from "node:path/posix";
import type {
  Experimental_SandboxDirectoryEntry as SandboxDirectoryEntry,
  Experimental_SandboxFileStat as SandboxFileStat,
  Experimental_SandboxProcess as SandboxProcess,
  Experimental_SandboxSession as SandboxSession,
} from "ai";
import type { HarnessV1NetworkPolicy, HarnessV1NetworkSandboxSession, HarnessV1PortEndpoint, HarnessV1SandboxProvider } from "@ai-sdk/harness";
import { Sandlot, type Sandbox, type Exec } from "./client.js";
import { SandlotError, isMissingPath } from "./errors.js";
import { abortError } from "./http.js";
import type { CreateSandboxOptions, ExecEvent, ExecResult, FileType, NetworkPolicy } from "./types.js";

export interface SandlotSessionOptions {
  /**
   * Base directory: where `run`/`spawn` start, and what relative paths of
   * every method resolve against.  Default /home/user.
   */
  workingDirectory?: string;
  /** Kill `run` commands after this long (ms).  Default 300000; 0 = none. */
  commandTimeoutMs?: number;
  /** Kill `spawn` processes after this long (ms).  Default 0 = none (kill() or abortSignal ends them). */
  spawnTimeoutMs?: number;
  /** Bytes of each stream `run` keeps (sandlotd's output_limit).  Default sandlotd's (1 MiB). */
  outputLimit?: number;
  /** Replaces the generated `description`. */
  description?: string;
}

type WritableSandboxProcess = SandboxProcess & { readonly stdin: WritableStream<Uint8Array> };
type ProcessOptions = { command: string; workingDirectory?: string; env?: Record<string, string>; abortSignal?: AbortSignal };

/** The exit code a shell would show: the code, or 128+signal when killed. */
export function exitCodeOf(r: ExecResult): number {
  if (r.exit_code !== null && r.exit_code !== undefined) return r.exit_code;
  if (r.signal) return 128 + r.signal;
  return r.timed_out ? 124 : 1;
}

/**
 * An AI SDK sandbox session over one sandlot sandbox.  It does not own the
 * sandbox: delete it (or let it expire) yourself, or use `sandbox.delete()`.
 */
export class SandlotSandboxSession implements SandboxSession {
  readonly sandbox: Sandbox;
  readonly workingDirectory: string;
  readonly description: string;
  private readonly commandTimeoutMs: number;
  private readonly spawnTimeoutMs: number;
  private readonly outputLimit?: number;

  constructor(sandbox: Sandbox, opts: SandlotSessionOptions = {}) {
    this.sandbox = sandbox;
    this.workingDirectory = posix.resolve("/home/user", opts.workingDirectory ?? "/home/user");
    this.commandTimeoutMs = opts.commandTimeoutMs ?? 300_000;
    this.spawnTimeoutMs = opts.spawnTimeoutMs ?? 0;
    this.outputLimit = opts.outputLimit;
    this.description = opts.description ?? [
      `A sandlot sandbox (id ${sandbox.id}): an isolated Linux environment.`,
      `Commands run with /bin/sh as an unprivileged user in ${this.workingDirectory}; relative paths resolve there.`,
      "python3, node and the usual command-line tools are installed; /home/user and /tmp are writable, the rest is read-only.",
      "There is no network access.",
    ].join(" ");
  }

  /** Creates a sandbox on `client` and a session over it. */
  static async create(client: Sandlot, create: CreateSandboxOptions = {}, opts: SandlotSessionOptions & { abortSignal?: AbortSignal } = {}): Promise<SandlotSandboxSession> {
    const sb = await client.create(create, { signal: opts.abortSignal });
    return new SandlotSandboxSession(sb, opts);
  }

  /** Resolves a path against the working directory. */
  resolve(path: string): string {
    if (typeof path !== "string" || path === "")
      throw new SandlotError(`a path must be a non-empty string (got ${JSON.stringify(path)})`, { code: "bad_option" });
    return posix.resolve(this.workingDirectory, path);
  }

  // ---- commands ----------------------------------------------------------

  readonly run = async (o: ProcessOptions): Promise<{ exitCode: number; stdout: string; stderr: string }> => {
    const r = await this.sandbox.exec(checkCommand(o.command), {
      cwd: this.resolve(o.workingDirectory ?? this.workingDirectory),
      env: o.env,
      timeout_ms: this.commandTimeoutMs,
      output_limit: this.outputLimit,
      signal: o.abortSignal,
    });
    return { exitCode: exitCodeOf(r), stdout: r.stdout, stderr: withStartError(r) };
  };

  readonly spawn = (async (o: ProcessOptions & { stdin?: boolean }): Promise<SandboxProcess | WritableSandboxProcess> => {
    const command = checkCommand(o.command);
    o.abortSignal?.throwIfAborted();
    const cwd = this.resolve(o.workingDirectory ?? this.workingDirectory);
    return o.stdin
      ? spawnWithStdin(this.sandbox, command, cwd, o.env, this.spawnTimeoutMs, o.abortSignal)
      : spawnStreamed(this.sandbox, command, cwd, o.env, this.spawnTimeoutMs, o.abortSignal);
  }) as SandboxSession["spawn"];

  // ---- files -------------------------------------------------------------

  readonly readFile = async (o: { path: string; abortSignal?: AbortSignal }): Promise<ReadableStream<Uint8Array> | null> => {
    try {
      return await this.sandbox.readFileStream(this.resolve(o.path), { signal: o.abortSignal });
    } catch (e) {
      if (isMissingPath(e)) return null;
      throw e;
    }
  };

  readonly readBinaryFile = async (o: { path: string; abortSignal?: AbortSignal }): Promise<Uint8Array | null> => {
    try {
      return await this.sandbox.readFile(this.resolve(o.path), { signal: o.abortSignal });
    } catch (e) {
      if (isMissingPath(e)) return null;
      throw e;
    }
  };

  readonly readTextFile = async (o: { path: string; abortSignal?: AbortSignal; encoding?: string; startLine?: number; endLine?: number }): Promise<string | null> => {
    const decoder = textDecoder(o.encoding);
    const bytes = await this.readBinaryFile(o);
    if (bytes === null) return null;
    const text = decoder.decode(bytes);
    if (o.startLine === undefined && o.endLine === undefined) return text;
    const start = Math.max(1, Math.floor(o.startLine ?? 1));
    const end = o.endLine === undefined ? Infinity : Math.floor(o.endLine);
    if (end < start) return "";
    // Lines keep their terminators, so a slice is byte-for-byte the file's.
    const lines = text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
    return lines.slice(start - 1, end === Infinity ? undefined : end).join("");
  };

  readonly writeFile = async (o: { path: string; content: ReadableStream<Uint8Array>; abortSignal?: AbortSignal }): Promise<void> => {
    await this.sandbox.writeFile(this.resolve(o.path), o.content, { signal: o.abortSignal });
  };

  readonly writeBinaryFile = async (o: { path: string; content: Uint8Array; abortSignal?: AbortSignal }): Promise<void> => {
    await this.sandbox.writeFile(this.resolve(o.path), o.content, { signal: o.abortSignal });
  };

  readonly writeTextFile = async (o: { path: string; content: string; abortSignal?: AbortSignal; encoding?: string }): Promise<void> => {
    await this.sandbox.writeFile(this.resolve(o.path), encodeText(o.content, o.encoding), { signal: o.abortSignal });
  };

  readonly stat = async (o: { path: string; abortSignal?: AbortSignal }): Promise<SandboxFileStat | null> => {
    const path = this.resolve(o.path);
    let info;
    try {
      info = await this.sandbox.stat(path, { signal: o.abortSignal });
    } catch (e) {
      if (isMissingPath(e)) return null;
      throw e;
    }
    if (info.type !== "symlink") return { type: info.type === "file" || info.type === "directory" ? info.type : "other", size: info.size };
    // sandlotd's stat does not follow symlinks; stat(1) -L inside the sandbox does.
    const r = await this.sandbox.exec(["stat", "-L", "-c", "%F\t%s", "--", path], { timeout_ms: 30_000, signal: o.abortSignal });
    if (r.exit_code !== 0) return null; // dangling link
    const [kind, size] = r.stdout.trim().split("\t");
    const type = kind === "directory" ? "directory" : kind?.startsWith("regular") ? "file" : "other";
    return { type, size: Number(size) || 0 };
  };

  readonly listDirectory = async (o: { path: string; abortSignal?: AbortSignal }): Promise<SandboxDirectoryEntry[] | null> => {
    try {
      const entries = await this.sandbox.list(this.resolve(o.path), { signal: o.abortSignal });
      return entries.map((e) => ({ name: e.name, type: e.type as FileType }));
    } catch (e) {
      if (isMissingPath(e)) return null;
      throw e;
    }
  };

  readonly deleteFile = async (o: { path: string; abortSignal?: AbortSignal }): Promise<boolean> => {
    const path = this.resolve(o.path);
    let info;
    try {
      info = await this.sandbox.stat(path, { signal: o.abortSignal });
    } catch (e) {
      if (isMissingPath(e)) return false;
      throw e;
    }
    if (info.type === "directory")
      throw new SandlotError(`deleteFile ${path}: is a directory (delete it with sandbox.remove(path, { recursive: true }))`,
        { code: "is_directory" });
    try {
      await this.sandbox.remove(path, { signal: o.abortSignal });
      return true;
    } catch (e) {
      if (isMissingPath(e)) return false;
      throw e;
    }
  };
}

function checkCommand(command: unknown): string {
  if (typeof command !== "string" || command.trim() === "")
    throw new SandlotError(`a command must be a non-empty string (got ${JSON.stringify(command)})`, { code: "bad_option" });
  return command;
}

function withStartError(r: ExecResult): string {
  if (r.error && !r.stderr) return r.error + "\n";
  return r.stderr;
}

function textDecoder(encoding = "utf-8"): TextDecoder {
  try {
    return new TextDecoder(encoding);
  } catch {
    throw new SandlotError(`unknown text encoding ${JSON.stringify(encoding)}`, { code: "bad_option" });
  }
}

function encodeText(content: string, encoding = "utf-8"): Uint8Array {
  if (typeof content !== "string")
    throw new SandlotError("writeTextFile: content must be a string", { code: "bad_option" });
  const e = encoding.toLowerCase();
  if (e === "utf-8" || e === "utf8") return new TextEncoder().encode(content);
  if (Buffer.isEncoding(e)) return new Uint8Array(Buffer.from(content, e as BufferEncoding));
  throw new SandlotError(`cannot encode text as ${JSON.stringify(encoding)} (supported: utf-8, utf16le, latin1, ascii)`,
    { code: "bad_option" });
}

/**
 * Pushes an exec's events into two byte streams and settles `wait` with the
 * exit; on abort, the streams error and `wait` rejects with the reason.
 */
function pump(events: AsyncIterable<ExecEvent>, signal: AbortSignal | undefined, onStart: (e: Extract<ExecEvent, { type: "start" }>) => void) {
  let out!: ReadableStreamDefaultController<Uint8Array>;
  let err!: ReadableStreamDefaultController<Uint8Array>;
  const stdout = new ReadableStream<Uint8Array>({ start: (c) => { out = c; } });
  const stderr = new ReadableStream<Uint8Array>({ start: (c) => { err = c; } });
  let base64 = false;
  const done = (async () => {
    try {
      for await (const ev of events) {
        if (ev.type === "start") {
          base64 = ev.output === "base64";
          onStart(ev);
        } else if (ev.type === "stdout" || ev.type === "stderr") {
          const bytes = base64 ? new Uint8Array(Buffer.from(ev.data, "base64")) : new TextEncoder().encode(ev.data);
          safeEnqueue(ev.type === "stdout" ? out : err, bytes);
        } else if (ev.type === "exit") {
          safeClose(out);
          safeClose(err);
          return { exitCode: exitCodeOf(ev.result) };
        }
      }
      throw new SandlotError("the exec stream ended without an exit event", { code: "io" });
    } catch (e) {
      const reason = signal?.aborted ? abortError(signal) : e;
      safeError(out, reason);
      safeError(err, reason);
      throw reason;
    }
  })();
  done.catch(() => {}); // observed through wait()
  return { stdout, stderr, done };
}

function safeEnqueue(c: ReadableStreamDefaultController<Uint8Array>, b: Uint8Array) {
  try { c.enqueue(b); } catch { /* the reader cancelled */ }
}
function safeClose(c: ReadableStreamDefaultController<Uint8Array>) {
  try { c.close(); } catch { /* already closed */ }
}
function safeError(c: ReadableStreamDefaultController<Uint8Array>, e: unknown) {
  try { c.error(e); } catch { /* already closed */ }
}

/** spawn without stdin: one streamed exec; closing it (kill/abort) kills the command. */
async function spawnStreamed(sb: Sandbox, command: string, cwd: string, env: Record<string, string> | undefined,
  timeoutMs: number, signal?: AbortSignal): Promise<SandboxProcess> {
  const ctl = new AbortController();
  const onAbort = () => ctl.abort(signal!.reason);
  signal?.addEventListener("abort", onAbort, { once: true });
  const events = sb.execStream(command, { cwd, env, timeout_ms: timeoutMs, output: "base64", signal: ctl.signal });
  // Wait for the start event so that a command that cannot start rejects here.
  const first = await events.next().catch((e) => {
    signal?.removeEventListener("abort", onAbort);
    throw e;
  });
  if (first.done || first.value.type !== "start") {
    signal?.removeEventListener("abort", onAbort);
    throw new SandlotError("the exec stream did not start with a start event", { code: "invalid_response" });
  }
  const start = first.value;
  let pid: number | undefined;
  const rest = (async function* () {
    yield start as ExecEvent;
    yield* events;
  })();
  const p = pump(rest, ctl.signal, (s) => { pid = s.pid; });
  p.done.finally(() => signal?.removeEventListener("abort", onAbort)).catch(() => {});
  let killed = false;
  const execId = start.exec_id;
  return {
    get pid() { return pid; },
    stdout: p.stdout,
    stderr: p.stderr,
    wait: () => p.done,
    kill: async () => {
      if (killed) return;
      killed = true;
      await sb.execHandle(execId).kill("KILL").catch(ignoreEnded);
      // The stream then ends with the exit event (killed by signal 9).
    },
  };
}

/** spawn with stdin: a background exec, followed, fed through the stdin route. */
async function spawnWithStdin(sb: Sandbox, command: string, cwd: string, env: Record<string, string> | undefined,
  timeoutMs: number, signal?: AbortSignal): Promise<WritableSandboxProcess> {
  const exec: Exec = await sb.spawn(command, { cwd, env, timeout_ms: timeoutMs, output: "base64", signal });
  const ctl = new AbortController();
  let killed = false;
  const kill = async () => {
    if (killed) return;
    killed = true;
    await exec.kill("KILL").catch(ignoreEnded);
  };
  const onAbort = () => {
    kill().catch(() => {});
    ctl.abort(signal!.reason);
  };
  if (signal?.aborted) onAbort();
  else signal?.addEventListener("abort", onAbort, { once: true });
  let pid: number | undefined;
  const p = pump(exec.follow({ signal: ctl.signal }), ctl.signal, (s) => { pid = s.pid; });
  p.done.finally(() => signal?.removeEventListener("abort", onAbort)).catch(() => {});
  // Writes go out one at a time, in order; close sends EOF.
  const stdin = new WritableStream<Uint8Array>({
    write: (chunk) => exec.writeStdin(chunk, { signal: ctl.signal }),
    close: () => exec.writeStdin(new Uint8Array(0), { eof: true, signal: ctl.signal }),
    abort: () => exec.writeStdin(new Uint8Array(0), { eof: true }).catch(() => {}),
  });
  return {
    get pid() { return pid; },
    stdout: p.stdout,
    stderr: p.stderr,
    stdin,
    wait: () => p.done,
    kill,
  };
}

function ignoreEnded(e: unknown): void {
  // 409: it has already exited; 404/410: it (or its sandbox) is gone.
  if (e instanceof SandlotError && (e.status === 409 || e.status === 404 || e.status === 410)) return;
  throw e;
}

// ---- harness provider ----------------------------------------------------

let harnessModule: Promise<typeof import("@ai-sdk/harness")> | undefined;

/** The harness's error classes, loaded from "@ai-sdk/harness" on first use. */
async function harnessErrors(): Promise<typeof import("@ai-sdk/harness")> {
  harnessModule ??= import("@ai-sdk/harness");
  return harnessModule;
}

/** The provider id the harness errors name. */
export const HARNESS_PROVIDER_ID = "sandlot";

/**
 * sandlotd's refusal of the client's credentials (401 unauthorized, 403
 * forbidden) as the harness's HarnessSandboxAuthenticationError, the
 * SandlotError kept as its cause; anything else is rethrown as it is.
 */
async function asAuthError(e: unknown): Promise<never> {
  if (e instanceof SandlotError && (e.status === 401 || e.status === 403)) {
    const { HarnessSandboxAuthenticationError } = await harnessErrors();
    throw new HarnessSandboxAuthenticationError({
      message: `sandlotd refused the credentials (${e.message}): give the provider a client with the daemon's ` +
        "token (sandlotHarnessProvider({ client: new Sandlot({ url, token }) })) or set SANDLOT_TOKEN " +
        "(the contents of sandlotd's --token-file)",
      sandboxProviderId: HARNESS_PROVIDER_ID,
      cause: e,
    });
  }
  throw e;
}

/** A HarnessCapabilityUnsupportedError saying what sandlot cannot do (cause: the SandlotError, if any). */
async function unsupported(message: string, cause?: unknown): Promise<never> {
  const { HarnessCapabilityUnsupportedError } = await harnessErrors();
  throw new HarnessCapabilityUnsupportedError({ message, cause });
}

export interface SandlotHarnessProviderOptions extends SandlotSessionOptions {
  /** The client (default: a new Sandlot() from the environment). */
  client?: Sandlot;
  /** Options of the sandboxes it creates.  auto_resume defaults to true. */
  create?: CreateSandboxOptions;
}

/**
 * The harness's network policy as sandlot's: "allow-all" is mode open (the
 * public internet; private and metadata addresses stay closed), "deny-all"
 * is none (loopback only), "custom" an allowlist of its hosts and CIDRs with
 * its denied CIDRs.
 */
export function sandlotNetworkPolicy(p: HarnessV1NetworkPolicy): NetworkPolicy {
  if (p.mode === "allow-all") return { mode: "open" };
  if (p.mode === "deny-all") return { mode: "none" };
  if (p.mode === "custom")
    return {
      mode: "allowlist",
      allow: [...(p.allowedHosts ?? []), ...(p.allowedCIDRs ?? [])],
      deny: [...(p.deniedCIDRs ?? [])],
    };
  throw new SandlotError(`unknown network policy mode ${JSON.stringify((p as { mode?: unknown }).mode)}`,
    { code: "bad_option" });
}

/** Metadata label carrying the harness session id. */
export const HARNESS_SESSION_LABEL = "ai-sdk-harness-session";
/** Metadata label carrying the harness recipe identity. */
export const HARNESS_IDENTITY_LABEL = "ai-sdk-harness-identity";

/** A harness network sandbox session over one sandlot sandbox. */
export class SandlotHarnessSession extends SandlotSandboxSession implements HarnessV1NetworkSandboxSession {
  get id(): string {
    return this.sandbox.id;
  }
  get defaultWorkingDirectory(): string {
    return this.workingDirectory;
  }
  /** The exposed ports (create.ports, setPorts), as of the last call that returned them. */
  get ports(): ReadonlyArray<number> {
    return (this.sandbox.info?.ports ?? []).map((p) => p.port);
  }
  /**
   * Where to reach an exposed port: through sandlotd's proxy (URL and token
   * header) on a TCP sandlotd, the port's own URL on the host on a unix
   * socket.  Fails for a port that is not exposed.
   */
  readonly getPortEndpoint = async (o: { port: number; protocol?: "http" | "https" | "ws" }): Promise<HarnessV1PortEndpoint> => {
    try {
      return await this.sandbox.portEndpoint(o.port, { protocol: o.protocol });
    } catch (e) {
      if (e instanceof SandlotError && e.code === "port_not_exposed")
        return unsupported(`sandlot sandbox ${this.id} does not expose port ${o.port}: ${e.message} ` +
          "(create it with create: { ports: [...] }, or call setPorts)", e);
      throw e;
    }
  };
  readonly getPortUrl = async (o: { port: number; protocol?: "http" | "https" | "ws" }): Promise<string> =>
    (await this.getPortEndpoint(o)).url;
  /** Replaces the exposed ports (those left out close; those kept keep their URL). */
  readonly setPorts = async (ports: ReadonlyArray<number>, o: { abortSignal?: AbortSignal } = {}): Promise<void> => {
    await this.sandbox.setPorts([...ports], { signal: o.abortSignal });
  };
  /**
   * Replaces the sandbox's network policy (sandlotNetworkPolicy()); when it
   * resolves, connections the new policy does not allow are closed.
   */
  readonly setNetworkPolicy = async (policy: HarnessV1NetworkPolicy): Promise<void> => {
    let p: NetworkPolicy;
    try {
      p = sandlotNetworkPolicy(policy);
    } catch (e) {
      return unsupported(`sandlot cannot apply this network policy: ${(e as Error).message}`, e);
    }
    await this.sandbox.setNetworkPolicy(p);
  };
  /** Pauses the sandbox: processes stop, files stay; resumeSession brings it back. */
  readonly stop = async (): Promise<void> => {
    try {
      await this.sandbox.pause();
    } catch (e) {
      if (e instanceof SandlotError && e.sandboxGone) return;
      throw e;
    }
  };
  /** Deletes the sandbox and its files. */
  readonly destroy = async (): Promise<void> => {
    try {
      await this.sandbox.delete();
    } catch (e) {
      if (e instanceof SandlotError && e.sandboxGone) return;
      throw e;
    }
  };
  readonly restricted = (): SandboxSession => {
    return new SandlotSandboxSession(this.sandbox, {
      workingDirectory: this.workingDirectory, description: this.description,
    });
  };
}

/**
 * A `HarnessV1SandboxProvider` backed by sandlotd.  createSession creates a
 * sandbox (labelled with the session id and identity, auto_resume on) and
 * runs `onFirstCreate` on it; resumeSession finds the newest sandbox with
 * that session id: a running one is used as is, a paused one is resumed, and
 * one that expired with its workspace kept is re-created from it
 * (from_snapshot), files and all, and then deleted (its kept workspace
 * released).  `stop` pauses, `destroy` deletes.
 */
export function sandlotHarnessProvider(opts: SandlotHarnessProviderOptions = {}): HarnessV1SandboxProvider & { readonly client: Sandlot } {
  let client = opts.client;
  const getClient = () => (client ??= new Sandlot());
  const sessionOpts: SandlotSessionOptions = {
    workingDirectory: opts.workingDirectory, commandTimeoutMs: opts.commandTimeoutMs,
    spawnTimeoutMs: opts.spawnTimeoutMs, outputLimit: opts.outputLimit, description: opts.description,
  };
  const labels = (sessionId?: string, identity?: string) => {
    const m: Record<string, string> = { ...(opts.create?.metadata ?? {}) };
    if (sessionId !== undefined) m[HARNESS_SESSION_LABEL] = sessionId;
    if (identity !== undefined) m[HARNESS_IDENTITY_LABEL] = identity;
    return m;
  };
  return {
    specificationVersion: "harness-sandbox-v1",
    providerId: "sandlot",
    get client() { return getClient(); },
    createSession: async (o = {}) => {
      const sb = await getClient().create(
        { auto_resume: true, ...(opts.create ?? {}), metadata: labels(o.sessionId, o.identity) },
        { signal: o.abortSignal }).catch(asAuthError);
      const session = new SandlotHarnessSession(sb, sessionOpts);
      if (o.onFirstCreate) {
        try {
          await o.onFirstCreate(session.restricted(), { abortSignal: o.abortSignal });
        } catch (e) {
          await sb.delete().catch(() => {});
          throw e;
        }
      }
      return session;
    },
    resumeSession: async (o) => {
      if (typeof o?.sessionId !== "string" || o.sessionId === "")
        throw new SandlotError("resumeSession needs a sessionId", { code: "bad_option" });
      const c = getClient();
      const found = (await c.list({ labels: { [HARNESS_SESSION_LABEL]: o.sessionId }, state: "all", signal: o.abortSignal })
        .catch(asAuthError))
        .filter((s) => s.state === "running" || s.state === "paused" || (s.state === "expired" && s.workspace_kept));
      const last = found[found.length - 1];
      if (!last)
        throw new SandlotError(`no sandlot sandbox to resume for harness session ${JSON.stringify(o.sessionId)} ` +
          "(none running or paused, and no expired one with its workspace kept)", { code: "not_found", status: 404 });
      let sb = c.sandbox(last.id);
      if (last.state === "paused") await sb.resume({ signal: o.abortSignal });
      else if (last.state === "running") await sb.refresh({ signal: o.abortSignal });
      else if (last.state === "expired") {
        sb = await c.create({ auto_resume: true, ...(opts.create ?? {}), disk: undefined, from_snapshot: last.id,
          metadata: last.metadata }, { signal: o.abortSignal });
        // The new sandbox has the files: release the old one's kept
        // workspace now rather than at the end of its retention.
        await c.sandbox(last.id).delete().catch((r) => { if (!(r instanceof SandlotError)) throw r; });
      }
      return new SandlotHarnessSession(sb, sessionOpts);
    },
  };
}
