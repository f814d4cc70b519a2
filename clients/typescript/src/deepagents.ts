/**
 * Deep Agents backend: `SandlotBackend extends BaseSandbox` from
 * "deepagents", so `createDeepAgent({ model, backend })` gets the
 * execute tool and file tools that work inside a sandlot sandbox.
 *
 * `execute`, `uploadFiles` and `downloadFiles` are what BaseSandbox needs;
 * `ls`, `read`, `grep` and `glob` are overridden: ls and read use sandlotd's
 * file routes (no shell, binary-safe, exact errors); grep and glob run one
 * command each whose output is NUL-separated, so paths holding ":" or
 * newlines come back whole.  grep and glob on "/" (the tools' default)
 * search /home/user and /tmp, not the read-only system tree.
 */
import * as posix from "node:path/posix";
import {
  BaseSandbox, SandboxError,
  type ExecuteResponse, type FileDownloadResponse, type FileInfo, type FileOperationError, type FileUploadResponse,
  type GlobResult, type GrepMatch, type GrepResult, type LsResult, type ReadResult,
} from "deepagents";
import { Sandlot, Sandbox } from "./client.js";
import { SandlotError, isMissingPath } from "./errors.js";
import type { CreateSandboxOptions } from "./types.js";

export interface SandlotBackendOptions {
  /** Kill `execute` commands after this long (ms).  Default 300000. */
  timeoutMs?: number;
  /** Bytes of combined output `execute` returns; the rest is cut and marked truncated.  Default 100000. */
  maxOutputBytes?: number;
  /** Where `execute` runs and relative paths resolve.  Default /home/user. */
  workingDirectory?: string;
  /** Files larger than this are read through the shell fallback, one page at a time.  Default 16 MiB. */
  maxDirectReadBytes?: number;
}

/** How `SandlotBackend.create()` and `initialize()` make the sandbox. */
export interface SandlotBackendCreateOptions extends SandlotBackendOptions {
  /** The daemon; default `new Sandlot()` (from the environment). */
  client?: Sandlot;
  /** Options of the sandbox to create. */
  create?: CreateSandboxOptions;
  /**
   * Files written before the backend is handed out: path (relative ones
   * under the working directory) to text content; parents are created.
   * A file that cannot be written fails the creation, and the sandbox is
   * deleted.
   */
  initialFiles?: Record<string, string>;
}

/** Extensions deepagents treats as binary (its MIME table); everything else is text. */
const BINARY_EXT = new Set([
  ".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".ico", ".tiff", ".tif", ".heic", ".heif", ".avif",
  ".mp3", ".wav", ".ogg", ".flac", ".m4a", ".aac", ".mp4", ".webm", ".mov", ".avi", ".mkv",
  ".pdf", ".zip", ".gz", ".tar", ".bz2", ".xz", ".7z", ".rar", ".bin", ".exe", ".so", ".dll", ".wasm",
  ".ppt", ".pptx", ".doc", ".docx", ".xls", ".xlsx", ".woff", ".woff2", ".ttf", ".otf", ".eot",
]);
const MIME: Record<string, string> = {
  ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp",
  ".pdf": "application/pdf", ".mp3": "audio/mpeg", ".wav": "audio/wav", ".mp4": "video/mp4", ".zip": "application/zip",
};

function isBinaryPath(p: string): boolean {
  return BINARY_EXT.has(posix.extname(p).toLowerCase());
}

export class SandlotBackend extends BaseSandbox {
  #sandbox: Sandbox | undefined;
  #running: boolean;
  #initializing = false;
  readonly #pending: SandlotBackendCreateOptions | undefined;
  private readonly timeoutMs: number;
  private readonly maxOutputBytes: number;
  private readonly cwd: string;
  private readonly maxDirectReadBytes: number;

  /**
   * `new SandlotBackend(sandbox, opts)` wraps a sandbox that exists;
   * `new SandlotBackend({ client, create, initialFiles, ... })` makes a
   * backend whose sandbox `initialize()` creates (the two-step creation of
   * deepagents' sandbox interface: `isRunning` is false until then).
   */
  constructor(sandbox: Sandbox, opts?: SandlotBackendOptions);
  constructor(opts?: SandlotBackendCreateOptions);
  constructor(sandboxOrOpts?: Sandbox | SandlotBackendCreateOptions, opts: SandlotBackendOptions = {}) {
    super();
    if (sandboxOrOpts instanceof Sandbox) {
      this.#sandbox = sandboxOrOpts;
      this.#running = true;
    } else {
      opts = (sandboxOrOpts as SandlotBackendCreateOptions | undefined) ?? {};
      this.#pending = opts;
      this.#running = false;
    }
    this.timeoutMs = opts.timeoutMs ?? 300_000;
    this.maxOutputBytes = opts.maxOutputBytes ?? 100_000;
    this.cwd = posix.resolve("/home/user", opts.workingDirectory ?? "/home/user");
    this.maxDirectReadBytes = opts.maxDirectReadBytes ?? 16 << 20;
  }

  /**
   * Creates a sandbox (on `client`, default from the environment), writes
   * `initialFiles` into it, and returns a running backend over it.
   */
  static async create(opts: SandlotBackendCreateOptions = {}): Promise<SandlotBackend> {
    const backend = new SandlotBackend(opts);
    await backend.initialize();
    return backend;
  }

  /**
   * Creates the sandbox of a backend constructed without one, and writes
   * its `initialFiles`.  Throws deepagents' `SandboxError` with code
   * ALREADY_INITIALIZED on a backend that has (or is getting) a sandbox.
   */
  async initialize(): Promise<void> {
    if (this.#sandbox || this.#initializing || !this.#pending)
      throw new SandboxError("the Sandlot backend already has a sandbox: initialize() runs once", "ALREADY_INITIALIZED");
    this.#initializing = true;
    try {
      const client = this.#pending.client ?? new Sandlot();
      const sandbox = await client.create(this.#pending.create ?? {});
      const files = Object.entries(this.#pending.initialFiles ?? {});
      if (files.length) {
        const enc = new TextEncoder();
        const failed: string[] = [];
        try {
          for (const [path, content] of files) {
            if (typeof content !== "string") {
              failed.push(`${path}: the content is not a string`);
              continue;
            }
            try {
              if (path === "") throw badPath(path);
              await sandbox.writeFile(posix.resolve(this.cwd, path), enc.encode(content));
            } catch (e) {
              if (!(e instanceof SandlotError) || e.sandboxGone) throw e;
              failed.push(`${path}: ${e.message}`);
            }
          }
          if (failed.length) throw new SandlotError(`initialFiles could not be written: ${failed.join("; ")}`, { code: "invalid_path" });
        } catch (e) {
          await sandbox.delete().catch(() => undefined);
          throw e;
        }
      }
      this.#sandbox = sandbox;
      this.#running = true;
    } finally {
      this.#initializing = false;
    }
  }

  /** The sandbox; a `SandboxError` (NOT_INITIALIZED) before `initialize()`. */
  get sandbox(): Sandbox {
    if (!this.#sandbox) throw new SandboxError("the Sandlot backend has no sandbox yet: call initialize() first", "NOT_INITIALIZED");
    return this.#sandbox;
  }

  get id(): string {
    return this.sandbox.id;
  }

  /**
   * Whether the sandbox is there to use: true once created, false before
   * `initialize()`, after `close()`, and once an operation found it gone
   * (deleted, expired or killed by someone else).
   */
  get isRunning(): boolean {
    return this.#running;
  }

  /** Deletes the sandbox. */
  async close(): Promise<void> {
    if (!this.#sandbox) return;
    await this.#sandbox.delete().catch((e) => {
      if (!(e instanceof SandlotError && e.sandboxGone)) throw e;
    });
    this.#running = false;
  }

  /** Notes a sandbox found gone (isRunning turns false) and rethrows. */
  private gone(e: unknown): never {
    if (e instanceof SandlotError && e.sandboxGone) this.#running = false;
    throw e;
  }

  private resolve(p: string): string {
    return posix.resolve(this.cwd, p);
  }

  /**
   * Runs `command` with /bin/sh in the working directory.  stdout and
   * stderr come back interleaved as they were written; past maxOutputBytes
   * the output is cut and `truncated` is true.  exitCode is 128+N for a
   * signal, and a timeout says so in the output.
   */
  async execute(command: string): Promise<ExecuteResponse> {
    return this.executeImpl(command).catch((e) => this.gone(e));
  }

  private async executeImpl(command: string): Promise<ExecuteResponse> {
    if (typeof command !== "string" || command.trim() === "")
      return { output: "Error: the command is empty", exitCode: 1, truncated: false };
    const chunks: Buffer[] = [];
    let size = 0;
    let truncated = false;
    let result;
    // One pipe for both streams ("exec 2>&1" first), so the output keeps the
    // order in which the command wrote it.
    const argv = ["/bin/sh", "-c", `exec 2>&1\n${command}`];
    for await (const ev of this.sandbox.execStream(argv, { cwd: this.cwd, timeout_ms: this.timeoutMs, output: "base64" })) {
      if (ev.type === "stdout" || ev.type === "stderr") {
        const b = Buffer.from(ev.data, "base64");
        if (size < this.maxOutputBytes) chunks.push(b.subarray(0, this.maxOutputBytes - size));
        if (size + b.length > this.maxOutputBytes) truncated = true;
        size += b.length;
      } else if (ev.type === "exit") {
        result = ev.result;
      }
    }
    if (!result) throw new SandlotError("execute: the exec stream ended without an exit event", { code: "io" });
    let output = Buffer.concat(chunks).toString("utf8");
    if (truncated) output += `\n[output truncated: ${size} bytes, first ${this.maxOutputBytes} shown]`;
    if (result.error) output += (output && !output.endsWith("\n") ? "\n" : "") + result.error;
    if (result.timed_out) output += `\n[command timed out after ${this.timeoutMs} ms and was killed]`;
    const exitCode = result.exit_code ?? (result.signal ? 128 + result.signal : null);
    return { output, exitCode, truncated };
  }

  /** Writes each file (parents created); a failure is reported for that file only. */
  async uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    return this.uploadFilesImpl(files).catch((e) => this.gone(e));
  }

  private async uploadFilesImpl(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    const out: FileUploadResponse[] = [];
    for (const [path, content] of files) {
      try {
        if (typeof path !== "string" || path === "") throw badPath(path);
        await this.sandbox.writeFile(this.resolve(path), content);
        out.push({ path, error: null });
      } catch (e) {
        out.push({ path, error: fileError(e) });
      }
    }
    return out;
  }

  /** Reads each file; a failure is reported for that file only. */
  async downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
    return this.downloadFilesImpl(paths).catch((e) => this.gone(e));
  }

  private async downloadFilesImpl(paths: string[]): Promise<FileDownloadResponse[]> {
    const out: FileDownloadResponse[] = [];
    for (const path of paths) {
      try {
        if (typeof path !== "string" || path === "") throw badPath(path);
        out.push({ path, content: await this.sandbox.readFile(this.resolve(path)), error: null });
      } catch (e) {
        out.push({ path, content: null, error: fileError(e) });
      }
    }
    return out;
  }

  /**
   * Directory entries from sandlotd's list route; directories end with "/".
   * A directory that does not exist lists as empty, as BaseSandbox.ls
   * does; a path that is not a directory is an error naming it.
   */
  override async ls(path: string): Promise<LsResult> {
    return this.lsImpl(path).catch((e) => this.gone(e));
  }

  private async lsImpl(path: string): Promise<LsResult> {
    try {
      const entries = await this.sandbox.list(this.resolve(path));
      const files: FileInfo[] = entries.map((e) => ({
        path: e.type === "directory" ? `${e.path}/` : e.path,
        is_dir: e.type === "directory",
        size: e.size,
        modified_at: e.modified_at,
      }));
      return { files };
    } catch (e) {
      if (isMissingPath(e) && !/Not a directory/i.test((e as Error).message)) return { files: [] };
      return { error: describe(e, path) };
    }
  }

  /**
   * Reads a page of lines (offset 0-based, limit lines) from the file's
   * bytes; binary files (by extension) come back whole as bytes.
   */
  override async read(filePath: string, offset = 0, limit = 500): Promise<ReadResult> {
    return this.readImpl(filePath, offset, limit).catch((e) => this.gone(e));
  }

  private async readImpl(filePath: string, offset = 0, limit = 500): Promise<ReadResult> {
    const path = this.resolve(filePath);
    let info;
    try {
      info = await this.sandbox.stat(path);
    } catch (e) {
      return { error: isMissingPath(e) ? `File '${filePath}' not found` : describe(e, filePath) };
    }
    if (info.type === "directory") return { error: `'${filePath}' is a directory, not a file` };
    if (isBinaryPath(path)) {
      const [r] = await this.downloadFiles([path]);
      if (!r?.content) return { error: `File '${filePath}' could not be read: ${r?.error}` };
      return { content: r.content, mimeType: MIME[posix.extname(path).toLowerCase()] ?? "application/octet-stream" };
    }
    if (info.size > this.maxDirectReadBytes) return super.read(path, offset, limit);
    const off = Number.isFinite(offset) ? Math.max(0, Math.floor(offset)) : 0;
    const lim = Number.isFinite(limit) ? Math.max(0, Math.floor(limit)) : 0;
    let text: string;
    try {
      text = await this.sandbox.readText(path);
    } catch (e) {
      return { error: isMissingPath(e) ? `File '${filePath}' not found` : describe(e, filePath) };
    }
    if (text.length === 0) return { content: "System reminder: File exists but has empty contents", mimeType: "text/plain" };
    const lines = text.split("\n");
    if (lines[lines.length - 1] === "") lines.pop();
    const total = lines.length;
    if (lim === 0 || off >= total) return { content: "", mimeType: "text/plain" };
    const end = Math.min(off + lim, total);
    return {
      content: lines.slice(off, end).join("\n"),
      mimeType: "text/plain",
      totalLines: total,
      startLine: off + 1,
      endLine: end,
      nextOffset: end < total ? end : undefined,
    };
  }

  /**
   * Literal (fixed-string) search with GNU grep, file names NUL-terminated;
   * binary files are skipped.  `glob` filters file names (e.g. "*.py").
   */
  override async grep(pattern: string, path = "/", glob: string | null = null, maxCount: number | null = null): Promise<GrepResult> {
    return this.grepImpl(pattern, path, glob, maxCount).catch((e) => this.gone(e));
  }

  private async grepImpl(pattern: string, path = "/", glob: string | null = null, maxCount: number | null = null): Promise<GrepResult> {
    if (typeof pattern !== "string" || pattern === "") return { error: "grep: the pattern is empty" };
    const base = this.resolve(path ?? "/");
    const argv = ["grep", "-rHnIFZ"];
    if (glob) argv.push(`--include=${glob}`);
    if (maxCount != null && maxCount > 0) argv.push(`--max-count=${Math.floor(maxCount)}`);
    argv.push("-e", pattern, "--", ...this.searchRoots(base));
    const r = await this.sandbox.exec(argv, { cwd: this.cwd, timeout_ms: this.timeoutMs, output_limit: 8 << 20 });
    if (r.exit_code === 2 && !r.stdout) return { error: `grep in '${path}': ${r.stderr.trim() || r.error || "failed"}` };
    const matches: GrepMatch[] = [];
    for (const line of r.stdout.split("\n")) {
      const nul = line.indexOf("\0");
      if (nul < 0) continue;
      const rest = line.slice(nul + 1);
      const colon = rest.indexOf(":");
      const n = Number(rest.slice(0, colon));
      if (colon < 0 || !Number.isInteger(n)) continue;
      matches.push({ path: line.slice(0, nul), line: n, text: rest.slice(colon + 1) });
    }
    if (r.truncated && matches.length) matches.pop(); // the last line may be cut
    const capped = maxCount != null && matches.length > maxCount;
    return {
      matches: capped ? matches.slice(0, maxCount) : matches,
      ...(capped || r.truncated ? { truncated: true } : {}),
    };
  }

  /**
   * Where grep and glob look: `base`, except that "/" (the tools' default)
   * means the sandbox's writable trees, /home/user and /tmp.  The rest of
   * the root is the read-only system (/usr alone holds hundreds of
   * thousands of files: a search of it takes minutes); name a directory
   * such as /usr/lib to search it.
   */
  private searchRoots(base: string): string[] {
    return base === "/" ? ["/home/user", "/tmp"] : [base];
  }

  /**
   * Files and directories under `path` whose path relative to it matches
   * `pattern` (`*`, `?`, `**`, `[...]`, `{a,b}`); one `find` with
   * NUL-separated output.
   */
  override async glob(pattern: string, path = "/"): Promise<GlobResult> {
    return this.globImpl(pattern, path).catch((e) => this.gone(e));
  }

  private async globImpl(pattern: string, path = "/"): Promise<GlobResult> {
    if (typeof pattern !== "string" || pattern === "") return { error: "glob: the pattern is empty" };
    const base = this.resolve(path ?? "/");
    let re: RegExp;
    try {
      re = globToRegExp(pattern.replace(/^\.\//, ""));
    } catch (e) {
      return { error: `glob: bad pattern ${JSON.stringify(pattern)}: ${(e as Error).message}` };
    }
    const argv = ["find", ...this.searchRoots(base), "-mindepth", "1", "-printf", "%y\\t%s\\t%T@\\t%p\\0"];
    const r = await this.sandbox.exec(argv, { cwd: this.cwd, timeout_ms: this.timeoutMs, output_limit: 32 << 20 });
    if (r.exit_code !== 0 && !r.stdout) return { error: `glob in '${path}': ${r.stderr.trim() || r.error || "failed"}` };
    const files: FileInfo[] = [];
    const records = r.stdout.split("\0");
    if (r.truncated) records.pop();
    for (const rec of records) {
      const [type, size, mtime, ...full] = rec.split("\t");
      const relPath = full.length ? posix.relative(base, full.join("\t")) : "";
      if (!relPath || !re.test(relPath)) continue;
      files.push({
        path: relPath,
        is_dir: type === "d",
        size: Number(size),
        modified_at: new Date(Number(mtime) * 1000).toISOString(),
      });
    }
    files.sort((a, b) => a.path.localeCompare(b.path));
    return { files, ...(r.truncated ? { truncated: true } : {}) };
  }
}

function badPath(p: unknown): SandlotError {
  return new SandlotError(`invalid path ${JSON.stringify(p)}`, { code: "invalid_path" });
}

/** Maps a sandlot failure on one file to deepagents' error codes; sandbox-level failures are thrown. */
function fileError(e: unknown): FileOperationError {
  if (!(e instanceof SandlotError)) throw e;
  if (e.sandboxGone || e.status === undefined && e.code !== "invalid_path") throw e;
  if (e.code === "invalid_path") return "invalid_path";
  if (/Is a directory/i.test(e.message)) return "is_directory";
  if (/Permission denied|Read-only file system|Operation not permitted/i.test(e.message) || e.status === 403) return "permission_denied";
  if (e.status === 404) return /Not a directory/.test(e.message) ? "invalid_path" : "file_not_found";
  if (e.status === 400 || e.status === 409 || e.status === 507) return "invalid_path";
  throw e;
}

function describe(e: unknown, path: string): string {
  if (isMissingPath(e)) return `'${path}' not found`;
  if (e instanceof SandlotError && !e.sandboxGone && e.status !== undefined && e.status < 500) return e.message;
  throw e;
}

/** A glob as a regular expression over a relative path. */
export function globToRegExp(glob: string): RegExp {
  let re = "";
  let inClass = false;
  let braces = 0;
  for (let i = 0; i < glob.length; i++) {
    const ch = glob[i]!;
    if (inClass) {
      if (ch === "]") inClass = false;
      re += ch === "\\" ? "\\\\" : ch;
      continue;
    }
    switch (ch) {
      case "*":
        if (glob[i + 1] === "*") {
          i++;
          if (glob[i + 1] === "/") {
            i++;
            re += "(?:.*/)?"; // "**/" matches zero or more directories
          } else re += ".*";
        } else re += "[^/]*";
        break;
      case "?":
        re += "[^/]";
        break;
      case "[":
        inClass = true;
        re += glob[i + 1] === "!" ? (i++, "[^") : "[";
        break;
      case "{":
        braces++;
        re += "(?:";
        break;
      case "}":
        if (braces > 0) {
          braces--;
          re += ")";
        } else re += "\\}";
        break;
      case ",":
        re += braces > 0 ? "|" : ",";
        break;
      default:
        re += ch.replace(/[.+^$()|\\]/g, "\\$&");
    }
  }
  if (inClass) throw new Error("unclosed [");
  if (braces) throw new Error("unclosed {");
  return new RegExp(`^${re}$`);
}
