/**
 * The transport under the client: HTTP/1.1 to sandlotd over a unix socket or
 * TCP (with a bearer token), on node:http only.  Bodies go out as buffers or
 * streamed (chunked); answers come back buffered, as a byte stream, or as
 * NDJSON events.  Every failure is a SandlotError naming what went wrong.
 */
import * as http from "node:http";
import { Readable } from "node:stream";
import { SandlotError } from "./errors.js";

/** Where sandlotd listens and how to authenticate. */
export interface ConnectionOptions {
  /**
   * Unix socket path.  Default: $SANDLOT_SOCKET, else
   * /run/sandlot/sandlot.sock (unless `url` or $SANDLOT_URL is set).
   */
  socketPath?: string;
  /** TCP base URL, e.g. "http://127.0.0.1:7070".  Default: $SANDLOT_URL. */
  url?: string;
  /** Bearer token for TCP.  Default: $SANDLOT_TOKEN. */
  token?: string;
  /**
   * Milliseconds to wait for an answer to start (headers) on requests that
   * are not expected to run long.  Default 60000.  Execs, code cells and
   * streams are not limited by it: they end by their own timeout_ms.
   */
  requestTimeoutMs?: number;
}

/** A body the client can send: bytes, text, or a stream of bytes. */
export type Body =
  | string
  | Uint8Array
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array | string>;

export interface RequestOptions {
  method: string;
  path: string;
  query?: Record<string, string | number | boolean | undefined | string[]>;
  json?: unknown;
  body?: Body;
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** Do not apply requestTimeoutMs (long-running requests). */
  long?: boolean;
}

export class Transport {
  readonly endpoint: string;
  private readonly socketPath?: string;
  private readonly host: string;
  private readonly port?: number;
  private readonly token?: string;
  private readonly agent: http.Agent;
  private readonly requestTimeoutMs: number;

  constructor(opts: ConnectionOptions = {}) {
    const env = process.env;
    const url = opts.url ?? (opts.socketPath ? undefined : env.SANDLOT_URL);
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 60_000;
    this.agent = new http.Agent({ keepAlive: true });
    if (url) {
      let u: URL;
      try {
        u = new URL(url);
      } catch {
        throw new SandlotError(`invalid sandlotd URL ${JSON.stringify(url)}`, { code: "bad_option" });
      }
      if (u.protocol !== "http:")
        throw new SandlotError(`sandlotd URL must be http:// (got ${u.protocol}); put a TLS proxy in front for https`,
          { code: "bad_option" });
      this.host = u.hostname.replace(/^\[|\]$/g, "");
      this.port = u.port ? Number(u.port) : 80;
      this.token = opts.token ?? env.SANDLOT_TOKEN;
      this.endpoint = `tcp:${u.host}`;
    } else {
      this.socketPath = opts.socketPath ?? env.SANDLOT_SOCKET ?? "/run/sandlot/sandlot.sock";
      this.host = "localhost";
      this.token = opts.token;
      this.endpoint = `unix:${this.socketPath}`;
    }
  }

  /**
   * The URL of `path` on sandlotd and the headers it needs (the bearer
   * token), for clients other than this one (a browser, a WebSocket
   * library) — or undefined on a unix socket, which has no URL.
   */
  publicUrl(path: string): { url: string; headers?: Record<string, string> } | undefined {
    if (this.socketPath) return undefined;
    const host = this.host.includes(":") ? `[${this.host}]` : this.host;
    const url = `http://${host}:${this.port}${path}`;
    return this.token ? { url, headers: { Authorization: `Bearer ${this.token}` } } : { url };
  }

  /** Closes idle keep-alive connections.  The transport stays usable. */
  close(): void {
    this.agent.destroy();
  }

  /**
   * Sends a request and resolves with the response once its headers are in
   * (status 2xx); a 4xx/5xx answer is read and rejected as a SandlotError.
   * The caller must consume or destroy the returned response.
   */
  async open(o: RequestOptions): Promise<http.IncomingMessage> {
    o.signal?.throwIfAborted();
    const headers: Record<string, string> = { ...(o.headers ?? {}) };
    if (this.token) headers["Authorization"] = `Bearer ${this.token}`;
    let payload: string | Uint8Array | undefined;
    let stream: Readable | undefined;
    if (o.json !== undefined) {
      payload = JSON.stringify(o.json);
      headers["Content-Type"] = "application/json";
    } else if (typeof o.body === "string" || o.body instanceof Uint8Array) {
      payload = o.body;
    } else if (o.body !== undefined) {
      stream = toNodeReadable(o.body);
    }
    if (payload !== undefined) headers["Content-Length"] = String(Buffer.byteLength(payload));
    const path = o.path + queryString(o.query);
    const what = `${o.method} ${o.path}`;

    return new Promise<http.IncomingMessage>((resolve, reject) => {
      let settled = false;
      const fail = (e: unknown) => {
        if (settled) return;
        settled = true;
        cleanup();
        req.destroy();
        stream?.destroy();
        reject(e);
      };
      const onAbort = () => fail(abortError(o.signal!));
      const cleanup = () => {
        o.signal?.removeEventListener("abort", onAbort);
        if (timer) clearTimeout(timer);
      };
      const req = http.request({
        method: o.method,
        path,
        headers,
        agent: this.agent,
        ...(this.socketPath ? { socketPath: this.socketPath } : { host: this.host, port: this.port }),
      });
      const timer = o.long || this.requestTimeoutMs <= 0 ? undefined : setTimeout(() => {
        fail(new SandlotError(`${what}: no answer from sandlotd at ${this.endpoint} within ${this.requestTimeoutMs} ms`,
          { code: "timeout" }));
      }, this.requestTimeoutMs);
      o.signal?.addEventListener("abort", onAbort, { once: true });
      req.on("error", (e: NodeJS.ErrnoException) => {
        fail(new SandlotError(`${what}: cannot reach sandlotd at ${this.endpoint}: ${e.message}`,
          { code: "unreachable", cause: e }));
      });
      req.on("response", (res) => {
        if (settled) {
          res.destroy();
          return;
        }
        const status = res.statusCode ?? 0;
        if (status >= 200 && status < 300) {
          settled = true;
          if (timer) clearTimeout(timer);
          // The abort listener stays until the response ends: aborting a
          // stream closes it (sandlotd then kills the command).
          const onAbortBody = () => res.destroy(abortError(o.signal!) as Error);
          o.signal?.removeEventListener("abort", onAbort);
          if (o.signal) {
            o.signal.addEventListener("abort", onAbortBody, { once: true });
            res.once("close", () => o.signal!.removeEventListener("abort", onAbortBody));
          }
          resolve(res);
          return;
        }
        readAll(res).then(
          (buf) => fail(SandlotError.fromResponse(what, status, buf)),
          (e) => fail(new SandlotError(`${what}: answer ${status} cut short: ${e.message}`, { status, code: "io" })),
        );
      });
      if (stream) {
        stream.on("error", (e) => fail(new SandlotError(`${what}: reading the request body failed: ${e.message}`,
          { code: "body", cause: e })));
        stream.pipe(req);
      } else {
        req.end(payload);
      }
    });
  }

  /** A request whose answer is JSON (or empty: then undefined). */
  async json<T>(o: RequestOptions): Promise<T> {
    const res = await this.open(o);
    const buf = await readAll(res, o.signal);
    if (buf.length === 0) return undefined as T;
    try {
      return JSON.parse(buf.toString("utf8")) as T;
    } catch {
      throw new SandlotError(`${o.method} ${o.path}: sandlotd sent invalid JSON`, { code: "invalid_response" });
    }
  }

  /** A request whose answer is raw bytes, buffered. */
  async bytes(o: RequestOptions): Promise<Uint8Array> {
    const res = await this.open(o);
    try {
      return new Uint8Array(await readAll(res, o.signal));
    } catch (e) {
      throw o.signal?.aborted ? e : cutShort(o, e);
    }
  }

  /**
   * A request whose answer is raw bytes, as a web stream.  A body that
   * breaks off (sandlotd cut the stream, or the connection died: the
   * chunked answer lacks its last chunk) errors the stream with a
   * SandlotError (code "io"), so that a part is never taken for the whole.
   */
  async stream(o: RequestOptions): Promise<ReadableStream<Uint8Array>> {
    const res = await this.open(o);
    const it = (res as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
    return new ReadableStream<Uint8Array>({
      async pull(ctl) {
        try {
          const { value, done } = await it.next();
          if (done) ctl.close();
          else ctl.enqueue(new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
        } catch (e) {
          ctl.error(o.signal?.aborted ? abortError(o.signal) : cutShort(o, e));
        }
      },
      cancel() {
        res.destroy();
      },
    });
  }

  /** A request whose answer is NDJSON: yields one parsed object per line. */
  async *ndjson<T>(o: RequestOptions): AsyncGenerator<T, void, undefined> {
    const res = await this.open({ ...o, headers: { ...(o.headers ?? {}), Accept: "application/x-ndjson" } });
    let rest = "";
    try {
      res.setEncoding("utf8");
      for await (const chunk of res as AsyncIterable<string>) {
        rest += chunk;
        let nl: number;
        while ((nl = rest.indexOf("\n")) >= 0) {
          const line = rest.slice(0, nl);
          rest = rest.slice(nl + 1);
          if (line.trim()) yield parseLine<T>(o, line);
        }
      }
      if (rest.trim()) yield parseLine<T>(o, rest);
    } catch (e) {
      if (o.signal?.aborted) throw abortError(o.signal);
      if (e instanceof SandlotError) throw e;
      throw new SandlotError(`${o.method} ${o.path}: the stream from sandlotd broke: ${(e as Error).message}`,
        { code: "io", cause: e });
    } finally {
      res.destroy();
    }
  }
}

/** The error of an answer whose body broke off before its end. */
function cutShort(o: RequestOptions, e: unknown): SandlotError {
  if (e instanceof SandlotError) return e;
  return new SandlotError(`${o.method} ${o.path}: the download was cut short (${(e as Error).message}): ` +
    "what arrived is incomplete", { code: "io", cause: e });
}

function parseLine<T>(o: RequestOptions, line: string): T {
  try {
    return JSON.parse(line) as T;
  } catch {
    throw new SandlotError(`${o.method} ${o.path}: sandlotd sent an invalid NDJSON line`, { code: "invalid_response" });
  }
}

function queryString(q?: RequestOptions["query"]): string {
  if (!q) return "";
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v === undefined) continue;
    if (Array.isArray(v)) for (const x of v) p.append(k, x);
    else p.append(k, typeof v === "boolean" ? (v ? "1" : "0") : String(v));
  }
  const s = p.toString();
  return s ? `?${s}` : "";
}

/** The abort reason as thrown by fetch and friends (a DOMException "AbortError" by default). */
export function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

export async function readAll(res: Readable, signal?: AbortSignal): Promise<Buffer> {
  const chunks: Buffer[] = [];
  try {
    for await (const c of res) chunks.push(typeof c === "string" ? Buffer.from(c) : (c as Buffer));
  } catch (e) {
    if (signal?.aborted) throw abortError(signal);
    throw e;
  }
  return Buffer.concat(chunks);
}

function toNodeReadable(body: Body): Readable {
  if (typeof (body as ReadableStream).getReader === "function")
    return Readable.fromWeb(body as import("node:stream/web").ReadableStream<Uint8Array>);
  return Readable.from(body as AsyncIterable<Uint8Array | string>, { objectMode: false });
}
