// A real sandlotd for the tests of E2B's in-sandbox API (envd and the code
// interpreter) with E2B's own SDKs, and the SDKs' Sandbox objects for
// sandboxes of it.
//
// The daemon runs on a unix socket in a temporary directory under /var/tmp
// (its own --data-dir there) and is stopped with SIGTERM at the end.  The
// SDKs speak HTTP over TCP: a relay on 127.0.0.1 (an ephemeral port) passes
// their connections to the socket, and E2B_SANDBOX_URL-style `sandboxUrl`
// points them at its /e2b prefix.  Sandboxes are made over sandlotd's own
// API, and the SDK's Sandbox is built for each as Sandbox.create() would
// from the control plane's answer (id, envd version).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const BIN_DIR = path.resolve(process.env.SANDLOT_TEST_BIN_DIR || path.join(REPO, 'build', 'bin'));
export const SANDLOTD = path.join(BIN_DIR, 'sandlotd');
// The envd version sandlotd stands in for: the SDKs turn features on by it
// (stdin on demand 0.3.0, closeStdin 0.5.2, octet-stream uploads 0.5.7).
export const ENVD_VERSION = '0.5.7';

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

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class Daemon {
  constructor() {
    this.base = fs.mkdtempSync(path.join('/var/tmp', 'sandlot-e2benvd-'));
    this.sock = path.join(this.base, 'sandlot.sock');
    this.dataDir = path.join(this.base, 'data');
    this.logPath = path.join(this.base, 'sandlotd.log');
    this.sandboxIds = [];
  }

  async start() {
    const log = fs.openSync(this.logPath, 'a');
    this.proc = spawn(SANDLOTD, ['--listen', `unix:${this.sock}`, '--data-dir', this.dataDir], {
      stdio: ['ignore', log, log],
    });
    fs.closeSync(log);
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, sig) => resolve({ code, sig })));
    const deadline = Date.now() + 15000;
    for (;;) {
      if (this.proc.exitCode !== null) throw new Error(`sandlotd exited:\n${this.logs()}`);
      try {
        if ((await this.request('GET', '/v1/health')).status === 200) break;
      } catch {
        /* not listening yet */
      }
      if (Date.now() > deadline) throw new Error(`sandlotd did not answer /v1/health:\n${this.logs()}`);
      await sleep(50);
    }
    this.conns = new Set();
    this.relay = net.createServer((client) => {
      const up = net.connect(this.sock);
      this.conns.add(client);
      this.conns.add(up);
      client.pipe(up);
      up.pipe(client);
      const close = () => {
        client.destroy();
        up.destroy();
        this.conns.delete(client);
        this.conns.delete(up);
      };
      client.on('error', close);
      up.on('error', close);
      client.on('close', close);
      up.on('close', close);
    });
    await new Promise((resolve) => this.relay.listen(0, '127.0.0.1', resolve));
    this.sandboxUrl = `http://127.0.0.1:${this.relay.address().port}/e2b`;
    return this;
  }

  logs() {
    try {
      return fs.readFileSync(this.logPath, 'utf8').slice(-6000);
    } catch {
      return '';
    }
  }

  async stop() {
    for (const id of this.sandboxIds) await this.request('DELETE', `/v1/sandboxes/${id}`).catch(() => {});
    if (this.relay) {
      // The SDKs keep connections alive: cut them, or close() waits for them.
      const closed = new Promise((resolve) => this.relay.close(resolve));
      for (const c of this.conns) c.destroy();
      await closed;
    }
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

  // A new sandbox of sandlotd, as the SDK class SandboxClass sees it.
  async sandbox(SandboxClass, options = {}) {
    const r = await this.request('POST', '/v1/sandboxes', options);
    if (r.status !== 201 && r.status !== 200) throw new Error(`create: ${r.status} ${r.body}`);
    this.sandboxIds.push(r.json.id);
    return this.attach(SandboxClass, r.json.id);
  }

  // The SDK's Sandbox for sandbox id (which need not exist).
  attach(SandboxClass, id) {
    return new SandboxClass({
      sandboxId: id,
      envdVersion: ENVD_VERSION,
      sandboxUrl: this.sandboxUrl,
      apiKey: 'unused-by-the-in-sandbox-api',
    });
  }
}
