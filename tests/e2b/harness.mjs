// A real sandlotd for the E2B SDK tests: on a unix socket (for the checks
// made over sandlot's own /v1 API) and on TCP 127.0.0.1 with a token (the
// SDKs' way in), in a temporary directory under /var/tmp with its own
// --data-dir; stopped with SIGTERM at the end and the directory removed.
//
// `daemon.opts()` is what a user passes to the SDK (or sets as E2B_API_KEY,
// E2B_API_URL, E2B_SANDBOX_URL): {apiKey, apiUrl, sandboxUrl}.
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const BIN_DIR = path.resolve(process.env.SANDLOT_TEST_BIN_DIR || path.join(REPO, 'build', 'bin'));
export const SANDLOTD = path.join(BIN_DIR, 'sandlotd');

// Why the tests cannot run here, or false.
export const skipReason = (() => {
  if (process.getuid() !== 0)
    return 'sandlotd needs root (uid maps, cgroups, loop devices): run the E2B tests as root';
  try {
    fs.accessSync(SANDLOTD, fs.constants.X_OK);
  } catch {
    throw new Error(`not built: ${SANDLOTD} (run \`make\` first)`);
  }
  return false;
})();

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(fn, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

// A TCP port nothing listens on now (the kernel's pick).
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export class E2bDaemon {
  constructor() {
    this.base = fs.mkdtempSync(path.join('/var/tmp', 'sandlot-e2b-'));
    this.sock = path.join(this.base, 'sandlot.sock');
    this.dataDir = path.join(this.base, 'data');
    this.logPath = path.join(this.base, 'sandlotd.log');
    this.tokenPath = path.join(this.base, 'token');
    this.token = `e2b-test-${crypto.randomBytes(16).toString('hex')}`;
    fs.writeFileSync(this.tokenPath, this.token, { mode: 0o600 });
  }

  async start() {
    this.port = await freePort();
    this.apiUrl = `http://127.0.0.1:${this.port}/e2b`;
    const log = fs.openSync(this.logPath, 'a');
    this.proc = spawn(
      SANDLOTD,
      ['--listen', `unix:${this.sock}`, '--listen', `tcp:127.0.0.1:${this.port}`, '--token-file',
        this.tokenPath, '--data-dir', this.dataDir],
      { stdio: ['ignore', log, log] },
    );
    fs.closeSync(log);
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, sig) => resolve({ code, sig })));
    await waitFor(async () => {
      if (this.proc.exitCode !== null) throw new Error(`sandlotd exited:\n${this.logs()}`);
      try {
        return (await this.request('GET', '/v1/health')).status === 200;
      } catch {
        return false;
      }
    }, 10000, 'sandlotd to answer /v1/health');
    return this;
  }

  // The SDK's connection options: the token as the API key, both URLs at /e2b.
  opts(extra = {}) {
    return { apiKey: this.token, apiUrl: this.apiUrl, sandboxUrl: this.apiUrl, ...extra };
  }

  logs() {
    try {
      return fs.readFileSync(this.logPath, 'utf8').slice(-5000);
    } catch {
      return '';
    }
  }

  // Stop with SIGTERM; returns its exit code; removes the directory.
  async stop() {
    let code = null;
    if (this.proc && this.proc.exitCode === null) {
      this.proc.kill('SIGTERM');
      const timer = setTimeout(() => this.proc.kill('SIGKILL'), 20000);
      ({ code } = await this.exited);
      clearTimeout(timer);
    } else if (this.proc) {
      code = this.proc.exitCode;
    }
    const logs = this.logs();
    fs.rmSync(this.base, { recursive: true, force: true });
    if (code !== 0) throw new Error(`sandlotd exited with ${code} on SIGTERM:\n${logs}`);
    return code;
  }

  // A request to sandlot's own API over the unix socket (no token needed).
  request(method, urlPath, body) {
    return rawRequest({ socketPath: this.sock }, method, urlPath, body);
  }

  // A request over TCP with the headers given (for the front door's checks).
  tcpRequest(method, urlPath, { headers = {}, body } = {}) {
    return rawRequest({ host: '127.0.0.1', port: this.port, headers }, method, urlPath, body);
  }

  async sandboxes(state = 'all') {
    const r = await this.request('GET', `/v1/sandboxes?state=${state}`);
    if (r.status !== 200) throw new Error(`GET /v1/sandboxes: ${r.status} ${r.body}`);
    return r.json.sandboxes;
  }

  // Run a shell command in the sandbox over /v1 (not the E2B surface):
  // {exit_code, stdout, stderr}.
  async sh(id, command) {
    const r = await this.request('POST', `/v1/sandboxes/${id}/exec`, { command });
    if (r.status !== 200) throw new Error(`exec in ${id}: ${r.status} ${r.body}`);
    return r.json;
  }
}

function rawRequest(target, method, urlPath, body) {
  return new Promise((resolve, reject) => {
    const data =
      body === undefined ? undefined : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    const headers = { ...(target.headers || {}) };
    if (data) {
      headers['Content-Type'] ??= 'application/json';
      headers['Content-Length'] = data.length;
    }
    const req = http.request({ ...target, method, path: urlPath, headers, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const raw = Buffer.concat(chunks);
        let json;
        try {
          json = raw.length ? JSON.parse(raw.toString()) : undefined;
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode, headers: res.headers, body: raw, json });
      });
    });
    req.setTimeout(60000, () => req.destroy(new Error(`${method} ${urlPath}: no answer in 60 s`)));
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}
