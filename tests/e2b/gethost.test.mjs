// getHost(port) with E2B's own JavaScript SDK (npm `e2b`, pinned in
// package.json): the host the SDK builds from create's `domain`
// (PORT-SANDBOXID.localhost:PORT of sandlotd's TCP listener) reaches that
// port of the sandbox through sandlotd.  The name is resolved to the
// loopback here, as curl and browsers do for names under localhost.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { Sandbox } from 'e2b';

import { E2bDaemon, skipReason } from './harness.mjs';

// Names under localhost are the loopback's (RFC 6761).
function loopback(hostname, opts, cb) {
  if (opts.all) cb(null, [{ address: '127.0.0.1', family: 4 }]);
  else cb(null, '127.0.0.1', 4);
}

// GET http://HOST/path with the name resolved to 127.0.0.1: {status, body, json}.
function get(host, path = '/', headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.get(`http://${host}${path}`, { headers, lookup: loopback }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const body = Buffer.concat(chunks).toString();
        let json;
        try {
          json = JSON.parse(body);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode, body, json });
      });
    });
    req.on('error', reject);
  });
}

// `python3 -m http.server PORT` in the background through the SDK, serving
// `text` as /; resolves once it says it serves.
async function serve(sbx, port, text) {
  await sbx.files.write(`/home/user/site${port}/index.html`, text);
  let seen = '';
  let ready;
  const serving = new Promise((resolve) => {
    ready = resolve;
  });
  const onOutput = (data) => {
    seen += data;
    if (seen.includes('Serving HTTP')) ready();
  };
  const handle = await sbx.commands.run(`python3 -u -m http.server ${port} -d /home/user/site${port}`, {
    background: true,
    onStdout: onOutput,
    onStderr: onOutput,
  });
  await serving;
  return handle;
}

describe('getHost (npm e2b)', { skip: skipReason, concurrency: false }, () => {
  let d;
  before(async () => {
    d = await new E2bDaemon().start();
  });
  after(async () => {
    if (d) await d.stop();
  });

  test('getHost(port) reaches a server in the sandbox, with the traffic token', async () => {
    const sbx = await Sandbox.create('base', d.opts());
    try {
      const server = await serve(sbx, 8000, 'hello from port 8000');
      const host = sbx.getHost(8000);
      assert.equal(host, `8000-${sbx.sandboxId}.localhost:${d.port}`);
      assert.ok(sbx.trafficAccessToken, 'create answers a traffic access token');
      const ok = await get(host, '/', { 'e2b-traffic-access-token': sbx.trafficAccessToken });
      assert.equal(ok.status, 200);
      assert.equal(ok.body, 'hello from port 8000');

      // No token: refused, naming what is missing.
      const refused = await get(host);
      assert.equal(refused.status, 401);
      assert.equal(refused.json.code, 401);
      assert.match(refused.json.message, /token/);

      // Another port, nothing listening: 502 saying so.
      const none = await get(sbx.getHost(8001), '/', { 'e2b-traffic-access-token': sbx.trafficAccessToken });
      assert.equal(none.status, 502);
      assert.match(none.json.message, /nothing is listening on port 8001/);

      // Bad ports, as getHost builds them.
      for (const port of [0, 70000]) {
        const bad = await get(sbx.getHost(port), '/', { 'x-api-key': d.token });
        assert.equal(bad.status, 400, `port ${port}`);
        assert.match(bad.json.message, /from 1 to 65535/);
      }

      // connect answers the same domain: the same host.
      const again = await Sandbox.connect(sbx.sandboxId, d.opts());
      assert.equal(again.getHost(8000), host);
      assert.equal((await get(again.getHost(8000), '/', { 'x-api-key': d.token })).body,
        'hello from port 8000');
      await server.kill();
    } finally {
      await sbx.kill();
    }
    // An ended sandbox's host: not found.
    const gone = await get(`8000-${sbx.sandboxId}.localhost:${d.port}`, '/', { 'x-api-key': d.token });
    assert.ok([404, 410].includes(gone.status), `status ${gone.status}`);
  });

  test('network.allowPublicTraffic: true opens the host without a token', async () => {
    const sbx = await Sandbox.create('base', { ...d.opts(), network: { allowPublicTraffic: true } });
    const closed = await Sandbox.create('base', { ...d.opts(), network: { allowPublicTraffic: false } });
    try {
      await serve(sbx, 3000, 'public');
      await serve(closed, 3000, 'private');
      const r = await get(sbx.getHost(3000));
      assert.equal(r.status, 200);
      assert.equal(r.body, 'public');
      assert.equal((await get(closed.getHost(3000))).status, 401);
      assert.equal((await get(closed.getHost(3000), '/', {
        'e2b-traffic-access-token': closed.trafficAccessToken,
      })).body, 'private');
      // One sandbox's token does not open another's host.
      assert.equal((await get(closed.getHost(3000), '/', {
        'e2b-traffic-access-token': sbx.trafficAccessToken,
      })).status, 401);
      const info = await sbx.getInfo();
      assert.equal(info.network.allowPublicTraffic, true);
      assert.equal(info.sandboxDomain, `localhost:${d.port}`);
    } finally {
      await sbx.kill();
      await closed.kill();
    }
  });
});
