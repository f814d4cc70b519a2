/**
 * The objects of sandlotd's HTTP API (spec/openapi.yaml), field for field.
 * Request and answer bodies keep the API's snake_case names.
 */

/** Bytes as an integer, or a string with a binary unit ("512M", "1G"). */
export type Size = number | string;

export type SandboxState = "running" | "paused" | "expired" | "deleted" | "lost" | "failed";

export type NetworkMode = "none" | "allowlist" | "open";

/**
 * A network policy (docs/network.md).  Rules: host names ("pypi.org"),
 * wildcards ("*.pythonhosted.org": the subdomains only) and IPv4 ranges
 * ("203.0.113.0/24").  `deny` wins.  Without `mode`, a policy with
 * `allow` is an allowlist.
 */
export interface NetworkPolicy {
  mode?: NetworkMode;
  allow?: string[];
  deny?: string[];
}

/** Packages to install: pip requirements and npm registry packages. */
export interface Packages {
  pip?: string[];
  npm?: string[];
}

export interface PackageInstallResult {
  /** What pip and npm printed (at most 256 KiB). */
  output: string;
  /** Nothing was downloaded (every package came from sandlotd's cache). */
  from_cache: boolean;
  duration_ms: number;
  /** Every package installed in the sandbox so far. */
  packages: { pip: string[]; npm: string[] };
}

/** One entry of a sandbox's network log: a DNS query or a TCP connection. */
export interface NetworkEvent {
  seq: number;
  time: string;
  layer: "dns" | "tls" | "http" | "tcp";
  verdict: "allowed" | "refused";
  /** "allowed", "not_allowed", "denied", "no_name", "closed_address", "address_mismatch", ... */
  reason: string;
  name: string | null;
  addr: string | null;
  port?: number;
  qtype?: number;
  answers?: number;
  bytes_out?: number;
  bytes_in?: number;
}

export interface NetworkLog {
  events: NetworkEvent[];
  /** The seq of the last entry: pass it as `after` for the next page. */
  next: number;
  /** Entries after `after` the ring had already forgotten. */
  dropped: number;
}

/** Body of POST /v1/sandboxes.  Every field is optional. */
export interface CreateSandboxOptions {
  image?: string;
  /** "ns" (namespaces) or "vm" (a microVM of its own: docs/vm.md); default: the daemon's. */
  isolation?: "ns" | "vm";
  memory?: Size;
  cpus?: number;
  pids?: number;
  disk?: Size;
  env?: Record<string, string>;
  /** Default {mode: "none"}: loopback only. */
  network?: NetworkPolicy | "none" | "open";
  /** Installed before the sandbox is handed out (a failure fails the create). */
  packages?: Packages;
  /** Ports to expose (1-65535, at most 32): see `PortInfo`. */
  ports?: number[];
  ttl_seconds?: number;
  idle_timeout_seconds?: number;
  metadata?: Record<string, string>;
  auto_resume?: boolean;
  paused_retention_seconds?: number;
  from_snapshot?: string;
  /** Answer only once the sandbox has set itself up (a set-up failure then fails the create);
   *  by default the create answers as soon as the sandbox is started, and its first request
   *  waits for the set-up (docs/daemon.md). */
  wait_ready?: boolean;
}

export interface SandboxInfo {
  id: string;
  state: SandboxState;
  created_at: string;
  expires_at: string | null;
  last_active_at: string;
  ended_at: string | null;
  end_reason: string | null;
  ttl_seconds: number;
  idle_timeout_seconds: number;
  /** The sandbox's backend (docs/vm.md). */
  isolation: "ns" | "vm";
  /** vm sandboxes: the accelerator QEMU uses; null for ns. */
  accel: "kvm" | "tcg" | null;
  options: {
    image: string;
    isolation: "ns" | "vm";
    memory: number;
    cpus: number | null;
    pids: number;
    disk: number;
    env: Record<string, string>;
    /** The policy in force now (rules normalised). */
    network: Required<NetworkPolicy>;
    /** Every package installed so far, once any was. */
    packages?: { pip: string[]; npm: string[] };
    /** The ports exposed now (changed by the ports routes). */
    ports: number[];
    from_snapshot?: string;
  };
  /** Only in the answer to a create with `packages`. */
  packages_install?: Omit<PackageInstallResult, "packages">;
  metadata: Record<string, string>;
  /** The exposed ports and where the host reaches them. */
  ports: PortInfo[];
  cursor: number;
  auto_resume: boolean;
  paused_retention_seconds: number;
  paused_at: string | null;
  workspace_kept: boolean;
  workspace_expires_at: string | null;
}

/**
 * An exposed port.  A server listening on it inside the sandbox (on 0.0.0.0
 * or 127.0.0.1) is reachable from the host at `url` (a port of the host's
 * 127.0.0.1 that sandlotd relays; null while the sandbox is paused or has
 * ended), and through the API at /v1/sandboxes/{id}/ports/{port}/ (HTTP and
 * WebSocket, with the API's token: the way in for remote clients).
 */
/** A paused sandbox's files in the daemon's archive store (`Sandbox.archive()`,
 * docs/fleet-move.md): another node resumes it with `resume({ from_archive: true })`. */
export interface StoreArchive {
  generation: number;
  sha256: string;
  bytes: number;
  url: string;
  node: string;
}

export interface PortInfo {
  port: number;
  url: string | null;
}

/** Where to reach an exposed port: a URL and the headers to send with it. */
export interface PortEndpoint {
  url: string;
  headers?: Record<string, string>;
}

export interface Health {
  status: "ok";
  version: string;
  sandboxes: number;
  uptime_seconds: number;
  pool?: Record<string, { size: number; ready: number }>;
}

export type ChangeKind = "created" | "modified" | "deleted";
export type FileType = "file" | "directory" | "symlink" | "other";

export interface Change {
  cursor: number;
  path: string;
  kind: ChangeKind;
  type: FileType;
  size: number;
  /** exec id, code context id, "api" for file routes, "scan" for a scan */
  source: string;
}

export interface ChangesPage {
  /** Pass as `since` next time; with `more`, the next page's `after`. */
  cursor: number;
  changes: Change[];
  /** true when the page was cut by sandlotd's size limit: ask the next with `after` set to `cursor` */
  more?: boolean;
  /** with excludeHidden: how many entries (with net: paths) this page left out */
  hidden?: number;
  /** true when entries the answer depends on were forgotten (sandlotd keeps a window of each sandbox's newest changes) */
  truncated?: boolean;
}

/** Body of POST .../exec apart from the command itself. */
export interface ExecOptions {
  cwd?: string;
  env?: Record<string, string>;
  /** text fed to stdin, then EOF */
  stdin?: string;
  stdin_base64?: string;
  /** kill after this long; default 300000; 0 = none */
  timeout_ms?: number;
  output?: "text" | "base64";
  /** bytes kept per stream (buffered and background execs) */
  output_limit?: number;
}

export interface ExecResult {
  exec_id: string;
  exit_code: number | null;
  signal: number | null;
  timed_out: boolean;
  oom_killed: boolean;
  pids_limited: boolean;
  truncated: boolean;
  duration_ms: number;
  stdout: string;
  stderr: string;
  /** why the command could not start (exit 126/127) */
  error?: string;
  changes: Change[];
  /**
   * true when `changes` is incomplete: the scan met its limits, or the answer's
   * size limit cut the list (the log has the rest, see `changes()`).
   */
  changes_truncated: boolean;
  cursor: number;
}

export interface ExecStatus {
  exec_id: string;
  state: "running" | "exited";
  mode: "buffered" | "stream" | "background";
  output: "text" | "base64";
  pid: number | null;
  truncated: boolean;
  command: string[];
  started_at: string;
  stdout?: string;
  stderr?: string;
  result?: ExecResult;
}

/** Events of a streamed exec (NDJSON), in order: start, output..., exit. */
export type ExecEvent =
  | { type: "start"; exec_id: string; pid: number; output: "text" | "base64" }
  | { type: "stdout"; data: string }
  | { type: "stderr"; data: string }
  | { type: "exit"; result: ExecResult };

export interface FileInfo {
  name: string;
  path: string;
  type: FileType;
  /** Bytes a read returns (the apparent size). */
  size: number;
  /** Bytes the file takes on disk: far below `size` for a sparse file. */
  allocated: number;
  /** octal, e.g. "0644" */
  mode: string;
  modified_at: string;
}

export interface ArchiveResult {
  files: number;
  directories: number;
  bytes: number;
  skipped?: string[];
}

export type Language = "python" | "javascript" | "bash";

export interface CodeContext {
  id: string;
  language: Language;
  busy: boolean;
  alive: boolean;
}

export interface CodeOptions {
  /** language of the default context to use (one of language and context is required) */
  language?: Language;
  /** a context id from createContext() */
  context?: string;
  timeout_ms?: number;
}

export interface CodeResult {
  context: string;
  status: "ok" | "error" | "interrupted" | "timeout";
  stdout: string;
  stderr: string;
  value: string | null;
  data?: Record<string, unknown>;
  displays?: Array<{ data: Record<string, unknown> }>;
  error: { name: string; value: string; traceback: string[] } | null;
  execution_count?: number;
  exit_code?: number;
  cwd?: string;
  duration_ms: number;
  state_lost?: boolean;
  /** what the cell did under /home/user (also in the log, source = the context id) */
  changes?: Change[];
  /** true when `changes` is incomplete (as for ExecResult) */
  changes_truncated?: boolean;
}

/** Messages of a streamed code cell; the last one is the result. */
export type CodeEvent =
  | { type: "stdout"; data: string }
  | { type: "stderr"; data: string }
  | { type: "display"; data: Record<string, unknown> }
  | ({ type: "result" } & CodeResult)
  | { type: string; [k: string]: unknown };
