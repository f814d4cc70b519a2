// A real sandlotd for the MCP tests, a small HTTP client for it, and a raw
// line-by-line driver of `sandlot mcp` for the JSON-RPC edge cases.
//
// The daemon runs on a unix socket in a temporary directory under /var/tmp
// (with its own --data-dir there), as tests/integration/daemon.py does, and
// is stopped with SIGTERM at the end; the directory is then removed.
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const BIN_DIR = path.resolve(process.env.SANDLOT_TEST_BIN_DIR || path.join(REPO, 'build', 'bin'));
export const SANDLOT = path.join(BIN_DIR, 'sandlot');
export const SANDLOTD = path.join(BIN_DIR, 'sandlotd');

// Why the tests cannot run here, or false.
export const skipReason = (() => {
  if (process.getuid() !== 0)
    return 'sandlotd needs root (uid maps, cgroups, loop devices): run the MCP tests as root';
  for (const p of [SANDLOT, SANDLOTD, path.join(BIN_DIR, 'sandlot-client')]) {
    try {
      fs.accessSync(p, fs.constants.X_OK);
    } catch {
      throw new Error(`not built: ${p} (run \`make\` first)`);
    }
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

// A free TCP port on 127.0.0.1 (for a tcp: listener).
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export class Daemon {
  // args: more sandlotd options; tcp: also listen on 127.0.0.1 with a
  // bearer token (this.url, this.token).
  constructor({ args = [], tcp = false } = {}) {
    this.base = fs.mkdtempSync(path.join('/var/tmp', 'sandlot-mcp-'));
    this.sock = path.join(this.base, 'sandlot.sock');
    this.dataDir = path.join(this.base, 'data');
    this.logPath = path.join(this.base, 'sandlotd.log');
    this.host = `unix:${this.sock}`;
    this.args = args;
    this.tcp = tcp;
  }

  async start() {
    const log = fs.openSync(this.logPath, 'a');
    const args = ['--listen', this.host, '--data-dir', this.dataDir, ...this.args];
    if (this.tcp) {
      const port = await freePort();
      this.token = crypto.randomBytes(16).toString('hex');
      const tokenFile = path.join(this.base, 'token');
      fs.writeFileSync(tokenFile, this.token + '\n', { mode: 0o600 });
      this.url = `http://127.0.0.1:${port}`;
      args.push('--listen', `tcp:127.0.0.1:${port}`, '--token-file', tokenFile);
    }
    this.proc = spawn(SANDLOTD, args, {
      stdio: ['ignore', log, log],
    });
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
    this.finalLogs = logs; // the directory goes
    fs.rmSync(this.base, { recursive: true, force: true });
    if (code !== 0) throw new Error(`sandlotd exited with ${code} on SIGTERM:\n${logs}`);
    return code;
  }

  request(method, urlPath, body) {
    return new Promise((resolve, reject) => {
      const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      const req = http.request(
        {
          socketPath: this.sock,
          method,
          path: urlPath,
          headers: data ? { 'Content-Type': 'application/json', 'Content-Length': data.length } : {},
        },
        (res) => {
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
            resolve({ status: res.statusCode, body: raw, json });
          });
        },
      );
      req.on('error', reject);
      if (data) req.write(data);
      req.end();
    });
  }

  async sandboxes() {
    const r = await this.request('GET', '/v1/sandboxes');
    if (r.status !== 200) throw new Error(`GET /v1/sandboxes: ${r.status} ${r.body}`);
    return r.json.sandboxes;
  }
}

// `sandlot mcp` driven line by line: requests, raw lines, answers by id.
export class RawServer {
  constructor(args, { env } = {}) {
    this.proc = spawn(SANDLOT, ['mcp', ...args], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, ...(env || {}) },
    });
    this.stderr = '';
    this.proc.stderr.on('data', (d) => (this.stderr += d));
    this.messages = [];
    this.waiters = [];
    readline.createInterface({ input: this.proc.stdout }).on('line', (line) => {
      this.messages.push(line);
      for (const w of this.waiters.splice(0)) w();
    });
    this.exited = new Promise((resolve) =>
      this.proc.on('exit', (code, signal) => resolve({ code, signal })),
    );
    this.nextId = 1;
  }

  send(line) {
    this.proc.stdin.write(typeof line === 'string' ? line + '\n' : JSON.stringify(line) + '\n');
  }

  // The next answer line (parsed), in order.
  async next(timeoutMs = 30000) {
    const deadline = Date.now() + timeoutMs;
    while (!this.messages.length) {
      if (Date.now() > deadline) throw new Error(`no answer within ${timeoutMs} ms; stderr:\n${this.stderr}`);
      if (this.proc.exitCode !== null) throw new Error(`sandlot mcp exited; stderr:\n${this.stderr}`);
      await new Promise((r) => {
        this.waiters.push(r);
        setTimeout(r, 100);
      });
    }
    return JSON.parse(this.messages.shift());
  }

  async request(method, params, timeoutMs) {
    const id = this.nextId++;
    this.send({ jsonrpc: '2.0', id, method, ...(params === undefined ? {} : { params }) });
    const answer = await this.next(timeoutMs);
    if (answer.id !== id) throw new Error(`expected the answer to ${id}, got ${JSON.stringify(answer)}`);
    return answer;
  }

  async initialize(protocolVersion = '2025-11-25') {
    const r = await this.request('initialize', {
      protocolVersion,
      capabilities: {},
      clientInfo: { name: 'raw-test', version: '1' },
    });
    this.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    return r;
  }

  callTool(name, args, timeoutMs) {
    return this.request('tools/call', { name, arguments: args }, timeoutMs);
  }

  // Close stdin and wait for the exit status.
  async close(timeoutMs = 20000) {
    this.proc.stdin.end();
    return this.wait(timeoutMs);
  }

  async wait(timeoutMs = 20000) {
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), timeoutMs);
    const r = await this.exited;
    clearTimeout(timer);
    return r;
  }
}

// The text of a tool result's text content, joined.
export const textOf = (result) =>
  result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
