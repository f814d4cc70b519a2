/**
 * One error type for everything the client reports.  Errors sandlotd
 * answers carry its machine `code` and HTTP `status`; the client's own
 * failures have codes of their own ("unreachable", "timeout", "io",
 * "invalid_response", "bad_option", "body").
 */
export class SandlotError extends Error {
  /** sandlotd's error code ("not_found", "sandbox_ended", ...) or the client's. */
  readonly code: string;
  /** HTTP status of sandlotd's answer; undefined for client-side failures. */
  readonly status?: number;
  /** For "sandbox_ended" / "sandbox_paused": the sandbox's state. */
  readonly state?: string;
  /** For "sandbox_ended": why it ended ("ttl", "idle", "deleted", ...). */
  readonly endReason?: string | null;
  /** For "package_install_failed" / "installer_missing": what the installers printed. */
  readonly output?: string;

  constructor(
    message: string,
    o: { code: string; status?: number; state?: string; endReason?: string | null; output?: string; cause?: unknown },
  ) {
    super(message, o.cause === undefined ? undefined : { cause: o.cause });
    this.name = "SandlotError";
    this.code = o.code;
    this.status = o.status;
    this.state = o.state;
    this.endReason = o.endReason;
    this.output = o.output;
  }

  /** Builds the error for a 4xx/5xx answer from its JSON body. */
  static fromResponse(what: string, status: number, body: Buffer): SandlotError {
    let code = `http_${status}`;
    let message = body.toString("utf8").trim().slice(0, 500) || `HTTP ${status}`;
    let state: string | undefined;
    let endReason: string | null | undefined;
    let output: string | undefined;
    try {
      const e = JSON.parse(body.toString("utf8")).error;
      if (e && typeof e.code === "string") {
        code = e.code;
        message = String(e.message ?? code);
        state = e.state;
        endReason = e.end_reason;
        output = typeof e.output === "string" ? e.output : undefined;
      }
    } catch {
      /* not JSON: keep the raw text */
    }
    return new SandlotError(`${what}: ${message} (${code}, HTTP ${status})`, { code, status, state, endReason, output });
  }

  /**
   * True when the sandbox itself is gone: it ended (410), or sandlotd does
   * not know it (404 for the sandbox, not for a path inside it).
   */
  get sandboxGone(): boolean {
    if (this.status === 410) return true;
    return this.status === 404 && /(^|: )(no sandbox |invalid sandbox id )/.test(this.message);
  }
}

export function isSandlotError(e: unknown, code?: string): e is SandlotError {
  return e instanceof SandlotError && (code === undefined || e.code === code);
}

/** A 404 about a path inside a (known) sandbox. */
export function isMissingPath(e: unknown): boolean {
  return e instanceof SandlotError && e.status === 404 && !e.sandboxGone;
}
