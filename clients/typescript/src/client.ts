/**
 * The sandlot client: `Sandlot` talks to one sandlotd; `Sandbox` is a handle
 * on one sandbox of it.  Every method takes an optional `{ signal }`; aborting
 * a running exec, code cell or stream closes its request, and sandlotd then
 * kills the command.
 */
import { SandlotError } from "./errors.js";
import { Transport, type Body, type ConnectionOptions } from "./http.js";
import type {
  ArchiveResult, Change, ChangesPage, CodeContext, CodeEvent, CodeOptions, CodeResult, CreateSandboxOptions, ExecEvent,
  ExecOptions, ExecResult, ExecStatus, FileInfo, Health, Language, NetworkLog, NetworkMode, NetworkPolicy,
  PackageInstallResult, Packages, PortEndpoint, PortInfo, SandboxInfo, SandboxState, StoreArchive,
} from "./types.js";

export interface SignalOption {
  signal?: AbortSignal;
}

export interface MaxBytesOption {
  /**
   * The most file data this download may bring (a positive whole number):
   * lowers sandlotd's --max-download for this request, never raises it.
   */
  maxBytes?: number;
}

function maxBytes(o: MaxBytesOption): number | undefined {
  if (o.maxBytes === undefined) return undefined;
  if (!Number.isSafeInteger(o.maxBytes) || o.maxBytes <= 0) {
    throw new SandlotError(`maxBytes must be a positive whole number, not ${o.maxBytes}`, { code: "bad_option" });
  }
  return o.maxBytes;
}

/** A command: a shell string (run by /bin/sh -c) or an argv array. */
export type Command = string | string[];

export interface SandlotOptions extends ConnectionOptions {}

export interface ChangesOptions extends SignalOption {
  /** One entry per path with its net effect since `since`. */
  net?: boolean;
  /** Leave out paths with a component starting with "." or named __pycache__ (counted in `hidden`). */
  excludeHidden?: boolean;
}

export interface ListOptions extends SignalOption {
  /** metadata filters "key=value" (or an object); all must match */
  labels?: string[] | Record<string, string>;
  state?: SandboxState | "all";
}

export class Sandlot {
  /** @internal */
  readonly transport: Transport;

  constructor(opts: SandlotOptions = {}) {
    this.transport = new Transport(opts);
  }

  /** "unix:/path" or "tcp:host:port" */
  get endpoint(): string {
    return this.transport.endpoint;
  }

  health(o: SignalOption = {}): Promise<Health> {
    return this.transport.json({ method: "GET", path: "/v1/health", signal: o.signal });
  }

  /** Creates a sandbox and returns a handle on it. */
  async create(options: CreateSandboxOptions = {}, o: SignalOption = {}): Promise<Sandbox> {
    const info = await this.transport.json<SandboxInfo>({
      method: "POST", path: "/v1/sandboxes", json: options, signal: o.signal, long: true,
    });
    return new Sandbox(this, info);
  }

  /** A handle on an existing sandbox (any state); rejects with 404 not_found if unknown. */
  async get(id: string, o: SignalOption = {}): Promise<Sandbox> {
    return new Sandbox(this, await this.info(id, o));
  }

  /** A handle without asking sandlotd (no request; errors show on first use). */
  sandbox(id: string): Sandbox {
    return new Sandbox(this, undefined, id);
  }

  info(id: string, o: SignalOption = {}): Promise<SandboxInfo> {
    return this.transport.json({ method: "GET", path: `/v1/sandboxes/${enc(id)}`, signal: o.signal });
  }

  async list(o: ListOptions = {}): Promise<SandboxInfo[]> {
    const labels = Array.isArray(o.labels) ? o.labels
      : Object.entries(o.labels ?? {}).map(([k, v]) => `${k}=${v}`);
    const r = await this.transport.json<{ sandboxes: SandboxInfo[] }>({
      method: "GET", path: "/v1/sandboxes", query: { label: labels, state: o.state }, signal: o.signal,
    });
    return r.sandboxes;
  }

  /** Prometheus text of GET /metrics. */
  async metrics(o: SignalOption = {}): Promise<string> {
    return Buffer.from(await this.transport.bytes({ method: "GET", path: "/metrics", signal: o.signal })).toString("utf8");
  }

  /** Closes idle connections (the client stays usable). */
  close(): void {
    this.transport.close();
  }
}

/** A background exec: feed its stdin, follow its output, kill it. */
export class Exec {
  constructor(readonly sandbox: Sandbox, readonly id: string) {}

  private get path() {
    return `${this.sandbox.path}/execs/${enc(this.id)}`;
  }

  status(o: SignalOption = {}): Promise<ExecStatus> {
    return this.sandbox.client.transport.json({ method: "GET", path: this.path, signal: o.signal });
  }

  /** Events from the start of the exec until its exit (all of them, also those before the call). */
  follow(o: SignalOption = {}): AsyncGenerator<ExecEvent, void, undefined> {
    return this.sandbox.client.transport.ndjson<ExecEvent>({
      method: "GET", path: this.path, query: { follow: "1" }, signal: o.signal, long: true,
    });
  }

  /** Writes bytes to its stdin; `eof: true` closes stdin afterwards. */
  async writeStdin(data: string | Uint8Array, o: SignalOption & { eof?: boolean } = {}): Promise<void> {
    await this.sandbox.client.transport.json({
      method: "POST", path: `${this.path}/stdin`, query: { eof: o.eof ? "1" : undefined },
      body: data, headers: { "Content-Type": "application/octet-stream" }, signal: o.signal, long: true,
    });
  }

  /** Sends a signal (default SIGKILL) to its process group.  409 if it has ended. */
  async kill(signal: number | string = "KILL", o: SignalOption = {}): Promise<void> {
    await this.sandbox.client.transport.json({
      method: "POST", path: `${this.path}/kill`, json: { signal }, signal: o.signal,
    });
  }
}

/** Handle on one sandbox.  Paths are absolute, or relative to /home/user. */
export class Sandbox {
  readonly id: string;
  /** The record as of the last create/get/refresh/pause/resume/keepalive. */
  info?: SandboxInfo;

  constructor(readonly client: Sandlot, info?: SandboxInfo, id?: string) {
    this.info = info;
    const sid = info?.id ?? id;
    if (!sid) throw new SandlotError("a sandbox handle needs an id", { code: "bad_option" });
    this.id = sid;
  }

  /** @internal */
  get path(): string {
    return `/v1/sandboxes/${enc(this.id)}`;
  }

  private get t(): Transport {
    return this.client.transport;
  }

  async refresh(o: SignalOption = {}): Promise<SandboxInfo> {
    return (this.info = await this.client.info(this.id, o));
  }

  /** Destroys the sandbox and its files (a kept workspace too). */
  async delete(o: SignalOption = {}): Promise<void> {
    await this.t.json({ method: "DELETE", path: this.path, signal: o.signal, long: true });
  }

  /** Stops every process, frees the memory, keeps /home/user and /tmp on disk.
   * With `memory: true`, a vm sandbox keeps its running state too (processes,
   * interpreter state, /tmp) and its resume carries on from there; an ns
   * sandbox refuses it (501 not_supported: it pauses its files only). */
  async pause(o: SignalOption & { memory?: boolean } = {}): Promise<SandboxInfo> {
    const json: Record<string, unknown> = o.memory ? { memory: true } : {};
    return (this.info = await this.t.json({ method: "POST", path: `${this.path}/pause`, json, signal: o.signal, long: true }));
  }

  /** Brings a paused sandbox back: same id, same files, no processes.  With
   * `from_archive`, on a daemon that does not hold it, takes it from the
   * daemon's archive store (a move to that node: docs/fleet-move.md). */
  async resume(o: SignalOption & { ttl_seconds?: number; from_archive?: boolean } = {}): Promise<SandboxInfo> {
    const json: Record<string, unknown> = o.ttl_seconds === undefined ? {} : { ttl_seconds: o.ttl_seconds };
    if (o.from_archive) json.from_archive = true;
    return (this.info = await this.t.json({ method: "POST", path: `${this.path}/resume`, json, signal: o.signal, long: true }));
  }

  /** Writes the paused sandbox's files to the daemon's archive store, so that
   * another node can resume it (docs/fleet-move.md); returns the archive. */
  async archive(o: SignalOption = {}): Promise<StoreArchive> {
    const r = await this.t.json<SandboxInfo & { archive: StoreArchive }>({ method: "POST", path: `${this.path}/archive`, json: {}, signal: o.signal, long: true });
    const { archive, ...info } = r;
    this.info = info as SandboxInfo;
    return archive;
  }

  /** Resets the idle clock; optionally sets a new TTL counted from now. */
  async keepalive(o: SignalOption & { ttl_seconds?: number } = {}): Promise<SandboxInfo> {
    const json = o.ttl_seconds === undefined ? {} : { ttl_seconds: o.ttl_seconds };
    return (this.info = await this.t.json({ method: "POST", path: `${this.path}/keepalive`, json, signal: o.signal }));
  }

  // ---- ports -------------------------------------------------------------

  /** The exposed ports and their URLs (also updates `info.ports`). */
  async ports(o: SignalOption = {}): Promise<PortInfo[]> {
    const r = await this.t.json<{ ports: PortInfo[] }>({ method: "GET", path: `${this.path}/ports`, signal: o.signal });
    if (this.info) this.info = { ...this.info, ports: r.ports };
    return r.ports;
  }

  /** Exposes one more port (409 if it already is, 400 past 32). */
  async exposePort(port: number, o: SignalOption = {}): Promise<PortInfo> {
    const p = await this.t.json<PortInfo>({ method: "POST", path: `${this.path}/ports`, json: { port }, signal: o.signal });
    if (this.info) this.info = { ...this.info, ports: [...this.info.ports.filter((x) => x.port !== port), p] };
    return p;
  }

  /**
   * Makes `ports` the exposed ports: the others are closed (with every
   * connection through them), the ones that stay keep their URL.
   */
  async setPorts(ports: number[], o: SignalOption = {}): Promise<PortInfo[]> {
    const r = await this.t.json<{ ports: PortInfo[] }>({ method: "PUT", path: `${this.path}/ports`, json: { ports }, signal: o.signal });
    if (this.info) this.info = { ...this.info, ports: r.ports };
    return r.ports;
  }

  /** Stops exposing a port: its listener and its connections close. */
  async removePort(port: number, o: SignalOption = {}): Promise<void> {
    await this.t.json({ method: "DELETE", path: `${this.path}/ports/${port}`, signal: o.signal });
    if (this.info) this.info = { ...this.info, ports: this.info.ports.filter((x) => x.port !== port) };
  }

  /**
   * Where to reach exposed `port`.  On a TCP sandlotd: through its proxy
   * (`/v1/sandboxes/{id}/ports/{port}/`, with the token in `headers`), which
   * works from anywhere that reaches the API.  On a unix socket: the port's
   * own URL on the host's 127.0.0.1.  `via` picks one; `protocol: "ws"`
   * gives a ws:// URL.  Fails (code port_not_exposed) for a port that is
   * not exposed, and when the sandbox is paused (its URL is null then).
   */
  async portEndpoint(port: number, o: SignalOption & { protocol?: "http" | "https" | "ws"; via?: "url" | "proxy" } = {}): Promise<PortEndpoint> {
    const ports = await this.ports(o);
    const p = ports.find((x) => x.port === port);
    if (!p)
      throw new SandlotError(`port ${port} is not exposed in sandbox ${this.id} (exposed: ${ports.map((x) => x.port).join(", ") || "none"})`,
        { code: "port_not_exposed", status: 404 });
    const proxy = this.t.publicUrl(`${this.path}/ports/${port}/`);
    const via = o.via ?? (proxy ? "proxy" : "url");
    let ep: PortEndpoint;
    if (via === "proxy") {
      if (!proxy)
        throw new SandlotError("the port proxy has no URL on a unix-socket sandlotd: use via \"url\"", { code: "bad_option" });
      ep = proxy;
    } else {
      if (!p.url)
        throw new SandlotError(`port ${port} of sandbox ${this.id} has no URL now (the sandbox is not running)`,
          { code: "port_not_listening", status: 409 });
      ep = { url: p.url + "/" };
    }
    if (o.protocol === "ws") ep = { ...ep, url: ep.url.replace(/^http:/, "ws:") };
    return ep;
  }

  // ---- network and packages (docs/network.md) ------------------------------

  /**
   * Replaces the sandbox's network policy.  When it resolves, DNS and new
   * connections follow the new policy and the connections it no longer
   * allows have been closed.
   */
  async setNetworkPolicy(policy: NetworkPolicy | NetworkMode, o: SignalOption = {}): Promise<SandboxInfo> {
    const json = typeof policy === "string" ? { mode: policy } : policy;
    return (this.info = await this.t.json({ method: "PUT", path: `${this.path}/network`, json, signal: o.signal }));
  }

  /** The policy in force now. */
  networkPolicy(o: SignalOption = {}): Promise<Required<NetworkPolicy>> {
    return this.t.json({ method: "GET", path: `${this.path}/network`, signal: o.signal });
  }

  /** The network log: DNS queries and connections, allowed and refused, after seq `after`. */
  networkLog(after = 0, o: SignalOption = {}): Promise<NetworkLog> {
    return this.t.json({ method: "GET", path: `${this.path}/network/log?after=${after}`, signal: o.signal });
  }

  /**
   * Installs pip and npm packages (pip --user; /home/user/node_modules).  The
   * sandbox itself never gets the registries.  A failure rejects with a
   * SandlotError whose `output` has what the installers printed.
   */
  installPackages(packages: Packages, o: SignalOption = {}): Promise<PackageInstallResult> {
    return this.t.json({ method: "POST", path: `${this.path}/packages`, json: packages, signal: o.signal, long: true });
  }

  // ---- commands ----------------------------------------------------------

  /** Runs a command and resolves when it has ended (output capped by output_limit). */
  exec(command: Command, opts: ExecOptions & SignalOption = {}): Promise<ExecResult> {
    const { signal, ...rest } = opts;
    return this.t.json({ method: "POST", path: `${this.path}/exec`, json: execBody(command, rest), signal, long: true });
  }

  /**
   * Runs a command and streams its output as it happens.  Every byte is
   * delivered (no cap).  Breaking out of the iteration, or aborting the
   * signal, closes the stream and sandlotd kills the command.
   */
  execStream(command: Command, opts: ExecOptions & SignalOption = {}): AsyncGenerator<ExecEvent, void, undefined> {
    const { signal, ...rest } = opts;
    return this.t.ndjson<ExecEvent>({ method: "POST", path: `${this.path}/exec`, json: execBody(command, rest), signal, long: true });
  }

  /**
   * Starts a command in the background (202) with its stdin open: feed it
   * with `writeStdin`, follow it, kill it.  It runs until it exits, its
   * timeout_ms (default 300000; 0 = none) or the sandbox ends.
   */
  async spawn(command: Command, opts: ExecOptions & SignalOption = {}): Promise<Exec> {
    const { signal, ...rest } = opts;
    const st = await this.t.json<ExecStatus>({
      method: "POST", path: `${this.path}/exec`, json: { ...execBody(command, rest), background: true }, signal,
    });
    return new Exec(this, st.exec_id);
  }

  /** A handle on an exec of this sandbox by id. */
  execHandle(execId: string): Exec {
    return new Exec(this, execId);
  }

  /** Recent execs, running first. */
  async execs(o: SignalOption = {}): Promise<ExecStatus[]> {
    return (await this.t.json<{ execs: ExecStatus[] }>({ method: "GET", path: `${this.path}/execs`, signal: o.signal })).execs;
  }

  // ---- files -------------------------------------------------------------

  /**
   * Writes a file (parents created; atomic: readers see the old or the new
   * content).  `data` may be a string, bytes, a web ReadableStream or any
   * async iterable of chunks (a Node stream): it is streamed.
   */
  async writeFile(path: string, data: Body, o: SignalOption & { mode?: number | string } = {}): Promise<{ path: string; size: number }> {
    const mode = typeof o.mode === "number" ? o.mode.toString(8).padStart(4, "0") : o.mode;
    return this.t.json({
      method: "PUT", path: `${this.path}/files`, query: { path, mode }, body: data,
      headers: { "Content-Type": "application/octet-stream" }, signal: o.signal, long: true,
    });
  }

  /**
   * Reads a whole file.  404 not_found if it does not exist; 413 too_large
   * if it is larger than the download limit (sandlotd's --max-download, or
   * the lower `maxBytes`), before any byte.
   */
  readFile(path: string, o: SignalOption & MaxBytesOption = {}): Promise<Uint8Array> {
    return this.t.bytes({ method: "GET", path: `${this.path}/files`, query: { path, max_bytes: maxBytes(o) }, signal: o.signal, long: true });
  }

  /** Reads a file as UTF-8 text. */
  async readText(path: string, o: SignalOption & MaxBytesOption = {}): Promise<string> {
    return new TextDecoder().decode(await this.readFile(path, o));
  }

  /** Reads a file as a byte stream (the request fails before any byte if the file is missing or too large). */
  readFileStream(path: string, o: SignalOption & MaxBytesOption = {}): Promise<ReadableStream<Uint8Array>> {
    return this.t.stream({ method: "GET", path: `${this.path}/files`, query: { path, max_bytes: maxBytes(o) }, signal: o.signal, long: true });
  }

  /** Metadata of a path (symlinks not followed). */
  stat(path: string, o: SignalOption = {}): Promise<FileInfo> {
    return this.t.json({ method: "GET", path: `${this.path}/files/stat`, query: { path }, signal: o.signal });
  }

  /** Entries of a directory (not recursive). */
  async list(path: string, o: SignalOption = {}): Promise<FileInfo[]> {
    return (await this.t.json<{ entries: FileInfo[] }>({
      method: "GET", path: `${this.path}/files/list`, query: { path }, signal: o.signal,
    })).entries;
  }

  /** Creates a directory and its parents (no error if it exists). */
  async mkdir(path: string, o: SignalOption = {}): Promise<void> {
    await this.t.json({ method: "POST", path: `${this.path}/files/mkdir`, query: { path }, signal: o.signal });
  }

  /** Deletes a file, an empty directory, or with `recursive` a tree. */
  async remove(path: string, o: SignalOption & { recursive?: boolean } = {}): Promise<void> {
    await this.t.json({
      method: "DELETE", path: `${this.path}/files`, query: { path, recursive: o.recursive ? "1" : undefined },
      signal: o.signal, long: true,
    });
  }

  /** Extracts a tar archive into `path` (default /home/user). */
  uploadArchive(tar: Body, o: SignalOption & { path?: string } = {}): Promise<ArchiveResult> {
    return this.t.json({
      method: "POST", path: `${this.path}/files/archive`, query: { path: o.path }, body: tar,
      headers: { "Content-Type": "application/x-tar" }, signal: o.signal, long: true,
    });
  }

  /**
   * The tree at `path` (default /home/user) as a tar stream; 413 too_large
   * first if its files hold more than the download limit (`maxBytes` lowers it).
   */
  downloadArchive(o: SignalOption & MaxBytesOption & { path?: string } = {}): Promise<ReadableStream<Uint8Array>> {
    return this.t.stream({ method: "GET", path: `${this.path}/files/archive`, query: { path: o.path, max_bytes: maxBytes(o) }, signal: o.signal, long: true });
  }

  /** /home/user as a tar stream. */
  snapshot(o: SignalOption = {}): Promise<ReadableStream<Uint8Array>> {
    return this.t.stream({ method: "GET", path: `${this.path}/snapshot`, signal: o.signal, long: true });
  }

  /**
   * One page of the changes under /home/user after cursor `since` (0: from
   * the start).  `net`: one entry per path with its net effect since `since`
   * (created, modified, deleted; a file created and deleted since is not
   * there).  `excludeHidden`: paths with a component starting with "." or
   * named __pycache__ (tool caches) left out, counted in `hidden`.  A page
   * cut short says `more`: ask the next with the same options and `after`
   * set to its cursor (`allChanges` does).
   */
  changes(since = 0, o: ChangesOptions & { after?: number } = {}): Promise<ChangesPage> {
    return this.t.json({
      method: "GET", path: `${this.path}/changes`, signal: o.signal,
      query: { since, after: o.after, net: o.net ? 1 : undefined, exclude_hidden: o.excludeHidden ? 1 : undefined },
    });
  }

  /**
   * Every page after `since` (following `more`), merged into one; with
   * `net`, one entry per path even when it changed again while the pages
   * were read (its later entry).
   */
  async allChanges(since = 0, o: ChangesOptions = {}): Promise<ChangesPage> {
    const all: ChangesPage = { cursor: since, changes: [] };
    const net = new Map<string, Change>();
    let after = since;
    for (;;) {
      const page = await this.changes(since, { ...o, after });
      if (page.truncated) all.truncated = true;
      if (page.hidden !== undefined) all.hidden = (all.hidden ?? 0) + page.hidden;
      for (const c of page.changes) {
        if (o.net) {
          net.delete(c.path);
          net.set(c.path, c);
        } else {
          all.changes.push(c);
        }
      }
      all.cursor = page.cursor;
      if (!page.more) {
        if (o.net) all.changes = [...net.values()];
        return all;
      }
      if (page.cursor <= after) {
        throw new SandlotError(`sandlotd's changes cursor did not advance past ${after}`, { code: "invalid_response" });
      }
      after = page.cursor;
    }
  }

  /** Logs what changed under /home/user now (what background processes wrote); the cursor after it. */
  async scanChanges(o: SignalOption = {}): Promise<number> {
    const r = await this.t.json<{ cursor: number }>({ method: "POST", path: `${this.path}/changes/scan`, signal: o.signal });
    return r.cursor;
  }

  // ---- code contexts -----------------------------------------------------

  /** Runs a cell in a long-lived interpreter; state is kept between cells of a context. */
  runCode(code: string, opts: CodeOptions & SignalOption = { language: "python" }): Promise<CodeResult> {
    const { signal, ...rest } = opts;
    return this.t.json({ method: "POST", path: `${this.path}/code`, json: codeBody(code, rest), signal, long: true });
  }

  /** Runs a cell and streams its messages; the last one has type "result". */
  runCodeStream(code: string, opts: CodeOptions & SignalOption = { language: "python" }): AsyncGenerator<CodeEvent, void, undefined> {
    const { signal, ...rest } = opts;
    return this.t.ndjson<CodeEvent>({ method: "POST", path: `${this.path}/code`, json: codeBody(code, rest), signal, long: true });
  }

  /** Interrupts the running cell of a context (SIGINT; killed after 5 s). */
  interruptCode(o: SignalOption & { context?: string; language?: Language } = {}): Promise<{ context: string; interrupted: boolean }> {
    const { signal, ...json } = o;
    return this.t.json({ method: "POST", path: `${this.path}/code/interrupt`, json, signal });
  }

  createContext(language: Language, o: SignalOption = {}): Promise<CodeContext> {
    return this.t.json({ method: "POST", path: `${this.path}/contexts`, json: { language }, signal: o.signal, long: true });
  }

  async contexts(o: SignalOption = {}): Promise<CodeContext[]> {
    return (await this.t.json<{ contexts: CodeContext[] }>({ method: "GET", path: `${this.path}/contexts`, signal: o.signal })).contexts;
  }

  async deleteContext(context: string, o: SignalOption = {}): Promise<void> {
    await this.t.json({ method: "DELETE", path: `${this.path}/contexts/${enc(context)}`, signal: o.signal });
  }
}

function enc(s: string): string {
  return encodeURIComponent(s);
}

function execBody(command: Command, o: ExecOptions): Record<string, unknown> {
  if (typeof command === "string") return { ...o, command };
  if (!Array.isArray(command) || command.length === 0)
    throw new SandlotError("a command is a non-empty string or a non-empty argv array", { code: "bad_option" });
  return { ...o, argv: command };
}

function codeBody(code: string, o: CodeOptions): Record<string, unknown> {
  if (!o.language && !o.context) return { language: "python", ...o, code };
  return { ...o, code };
}
