// The E2B-compatible API's control plane driven by E2B's own JavaScript SDK
// (npm `e2b`, pinned in package.json): create, getInfo, list, setTimeout,
// kill, pause, connect; the key headers at the front door; E2B's error
// shape; bad inputs.  What the SDK did is checked over sandlot's own /v1
// API on the unix socket, not through the surface under test.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Sandbox as CodeSandbox } from '@e2b/code-interpreter';
import { AuthenticationError, Sandbox, SandboxError, SandboxNotFoundError } from 'e2b';

import { E2bDaemon, skipReason } from './harness.mjs';

describe('E2B control plane (npm e2b)', { skip: skipReason, concurrency: false }, () => {
  let d;
  before(async () => {
    d = await new E2bDaemon().start();
  });
  after(async () => {
    if (d) await d.stop();
  });

  test('Sandbox.create: template, timeoutMs, envs and metadata reach the sandbox', async () => {
    const t0 = Date.now();
    const sbx = await Sandbox.create('base', {
      ...d.opts(),
      timeoutMs: 120_000,
      envs: { GREETING: 'hello from e2b' },
      metadata: { owner: 'alice', job: 'create-test' },
    });
    try {
      assert.match(sbx.sandboxId, /^sb-/);
      // The sandbox exists in sandlotd, running, with the options mapped.
      const rec = (await d.request('GET', `/v1/sandboxes/${sbx.sandboxId}`)).json;
      assert.equal(rec.state, 'running');
      assert.deepEqual(rec.metadata, { owner: 'alice', job: 'create-test' });
      assert.equal(rec.ttl_seconds, 120);
      assert.equal(rec.idle_timeout_seconds, 0);
      const r = await d.sh(sbx.sandboxId, 'printf %s "$GREETING"');
      assert.equal(r.stdout, 'hello from e2b');

      const info = await sbx.getInfo();
      assert.equal(info.sandboxId, sbx.sandboxId);
      assert.equal(info.state, 'running');
      assert.deepEqual(info.metadata, { owner: 'alice', job: 'create-test' });
      assert.ok(info.envdVersion, 'envdVersion is reported');
      const ttl = info.endAt.getTime() - info.startedAt.getTime();
      assert.ok(Math.abs(ttl - 120_000) < 2000, `endAt - startedAt = ${ttl} ms`);
      assert.ok(info.startedAt.getTime() >= t0 - 2000);
    } finally {
      await sbx.kill();
    }
  });

  test('without timeoutMs a sandbox gets the SDKs\' default of 300 s', async () => {
    const sbx = await Sandbox.create(d.opts());
    try {
      const rec = (await d.request('GET', `/v1/sandboxes/${sbx.sandboxId}`)).json;
      assert.equal(rec.ttl_seconds, 300);
      assert.equal(rec.options.image, 'host', 'the default template is the default image');
    } finally {
      await sbx.kill();
    }
  });

  test('@e2b/code-interpreter: its default template is the default image too', async () => {
    const sbx = await CodeSandbox.create({ ...d.opts(), timeoutMs: 60_000 });
    try {
      const rec = (await d.request('GET', `/v1/sandboxes/${sbx.sandboxId}`)).json;
      assert.equal(rec.state, 'running');
      assert.equal(rec.options.image, 'host');
      assert.equal((await CodeSandbox.getInfo(sbx.sandboxId, d.opts())).state, 'running');
    } finally {
      assert.equal(await sbx.kill(), true);
    }
  });

  test('setTimeout moves the deadline; kill ends it and a second kill says false', async () => {
    const sbx = await Sandbox.create('base', { ...d.opts(), timeoutMs: 60_000 });
    const before = Date.now();
    await sbx.setTimeout(600_000);
    const info = await Sandbox.getInfo(sbx.sandboxId, d.opts());
    const left = info.endAt.getTime() - before;
    assert.ok(left > 590_000 && left < 610_000, `deadline ${left} ms from the call`);
    const rec = (await d.request('GET', `/v1/sandboxes/${sbx.sandboxId}`)).json;
    assert.equal(rec.ttl_seconds, 600);

    assert.equal(await sbx.kill(), true);
    const ended = (await d.request('GET', `/v1/sandboxes/${sbx.sandboxId}`)).json;
    assert.equal(ended.state, 'deleted');
    assert.equal(await Sandbox.kill(sbx.sandboxId, d.opts()), false);
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId, d.opts()), SandboxNotFoundError);
    await assert.rejects(Sandbox.setTimeout(sbx.sandboxId, 10_000, d.opts()), SandboxNotFoundError);
  });

  test('a sandbox past its timeout is gone for the SDK', async () => {
    const sbx = await Sandbox.create('base', { ...d.opts(), timeoutMs: 1000 });
    // The reaper ends it (state expired over /v1); E2B then knows it no more.
    const { waitFor } = await import('./harness.mjs');
    await waitFor(async () => {
      const rec = (await d.request('GET', `/v1/sandboxes/${sbx.sandboxId}`)).json;
      return rec.state === 'expired';
    }, 15000, 'the sandbox to expire');
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId, d.opts()), SandboxNotFoundError);
  });

  test('Sandbox.list: metadata and state filters, pagination with nextToken', async () => {
    const tag = `list-${process.pid}`;
    const made = [];
    try {
      for (let i = 0; i < 3; i++)
        made.push(await Sandbox.create('base', { ...d.opts(), timeoutMs: 120_000, metadata: { tag, n: `${i}` } }));
      await Sandbox.create('base', { ...d.opts(), timeoutMs: 120_000, metadata: { tag: 'other' } }).then((s) =>
        made.push(s),
      );

      // Two pages of two, then one, newest first (E2B's default order).
      const pager = Sandbox.list({ ...d.opts(), query: { metadata: { tag } }, limit: 2 });
      const page1 = await pager.nextItems();
      assert.equal(page1.length, 2);
      assert.equal(pager.hasNext, true);
      const page2 = await pager.nextItems();
      assert.equal(page2.length, 1);
      assert.equal(pager.hasNext, false);
      const ids = [...page1, ...page2].map((s) => s.sandboxId);
      assert.deepEqual(ids, made.slice(0, 3).map((s) => s.sandboxId).reverse());
      for (const s of [...page1, ...page2]) {
        assert.equal(s.metadata.tag, tag);
        assert.equal(s.state, 'running');
      }

      // A value with the characters the filter's own syntax uses.
      const odd = await Sandbox.create('base', {
        ...d.opts(), timeoutMs: 120_000, metadata: { tag: `${tag}-odd`, 'k/1': 'a b&c=d%e+f' },
      });
      made.push(odd);
      const oddList = await Sandbox.list({ ...d.opts(), query: { metadata: { 'k/1': 'a b&c=d%e+f' } } }).nextItems();
      assert.deepEqual(oddList.map((s) => s.sandboxId), [odd.sandboxId]);
      assert.deepEqual(oddList[0].metadata, { tag: `${tag}-odd`, 'k/1': 'a b&c=d%e+f' });
      assert.deepEqual(await Sandbox.list({ ...d.opts(), query: { metadata: { 'k/1': 'a b' } } }).nextItems(), []);

      // Ascending order, and a filter on two keys.
      const asc = await Sandbox.list({ ...d.opts(), query: { metadata: { tag, n: '1' } }, order: 'asc' }).nextItems();
      assert.deepEqual(asc.map((s) => s.sandboxId), [made[1].sandboxId]);

      // State filter: pause one, list the paused ones only.
      assert.equal(await made[0].pause(), true);
      const paused = await Sandbox.list({ ...d.opts(), query: { metadata: { tag }, state: ['paused'] } }).nextItems();
      assert.deepEqual(paused.map((s) => s.sandboxId), [made[0].sandboxId]);
      const running = await Sandbox.list({ ...d.opts(), query: { metadata: { tag }, state: ['running'] } }).nextItems();
      assert.equal(running.length, 2);
    } finally {
      for (const s of made) await s.kill();
    }
    const left = await Sandbox.list({ ...d.opts(), query: { metadata: { tag } } }).nextItems();
    assert.deepEqual(left, []);
  });

  test('pause keeps the files; connect resumes the same sandbox', async () => {
    const sbx = await Sandbox.create('base', { ...d.opts(), timeoutMs: 120_000 });
    try {
      await d.sh(sbx.sandboxId, 'echo kept > /home/user/note.txt');
      assert.equal(await sbx.pause(), true);
      assert.equal(await Sandbox.pause(sbx.sandboxId, d.opts()), false, 'a second pause says false');
      let rec = (await d.request('GET', `/v1/sandboxes/${sbx.sandboxId}`)).json;
      assert.equal(rec.state, 'paused');
      assert.equal((await sbx.getInfo()).state, 'paused');

      const again = await Sandbox.connect(sbx.sandboxId, { ...d.opts(), timeoutMs: 300_000 });
      assert.equal(again.sandboxId, sbx.sandboxId);
      rec = (await d.request('GET', `/v1/sandboxes/${sbx.sandboxId}`)).json;
      assert.equal(rec.state, 'running');
      assert.equal(rec.ttl_seconds, 300);
      assert.equal((await d.sh(sbx.sandboxId, 'cat /home/user/note.txt')).stdout, 'kept\n');

      // connect to a running sandbox extends its timeout, never shortens it.
      await Sandbox.connect(sbx.sandboxId, { ...d.opts(), timeoutMs: 10_000 });
      rec = (await d.request('GET', `/v1/sandboxes/${sbx.sandboxId}`)).json;
      assert.equal(rec.ttl_seconds, 300);
    } finally {
      await sbx.kill();
    }
  });

  test('bad inputs: unknown sandbox, bad template, bad timeout, unsupported options', async () => {
    await assert.rejects(Sandbox.connect('sb-doesnotexist', d.opts()), SandboxNotFoundError);
    await assert.rejects(Sandbox.getInfo('sb-doesnotexist', d.opts()), SandboxNotFoundError);
    assert.equal(await Sandbox.kill('sb-doesnotexist', d.opts()), false);
    await assert.rejects(Sandbox.pause('sb-doesnotexist', d.opts()), SandboxNotFoundError);

    await assert.rejects(Sandbox.create('no-such-image', d.opts()), (e) => {
      assert.ok(e instanceof SandboxError, `${e}`);
      assert.match(e.message, /^400: .*unknown image "no-such-image"/);
      return true;
    });
    await assert.rejects(Sandbox.create('base', { ...d.opts(), timeoutMs: -5000 }), /400: "timeout" must be/);
    await assert.rejects(
      Sandbox.create('base', { ...d.opts(), metadata: { 'bad key!': 'x' } }),
      /400: invalid sandbox options: field "metadata": invalid key/,
    );
    await assert.rejects(
      Sandbox.create('base', { ...d.opts(), allowInternetAccess: true }),
      /400: "allow_internet_access" is not supported/,
    );
    await assert.rejects(
      Sandbox.create('base', { ...d.opts(), lifecycle: { onTimeout: 'pause' } }),
      /400: "autoPause" is not supported/,
    );
    // Nothing was created by any of those.
    const live = (await d.sandboxes('running')).length;
    assert.equal(live, 0);
  });

  test('what is not mapped answers E2B\'s error shape naming it', async () => {
    await assert.rejects(Sandbox.getMetrics('sb-whatever', d.opts()), /501: GET \/e2b\/sandboxes\/sb-whatever\/metrics is not supported/);
    const r = await d.tcpRequest('GET', '/e2b/templates', { headers: { 'X-API-KEY': d.token } });
    assert.equal(r.status, 501);
    assert.deepEqual(Object.keys(r.json).sort(), ['code', 'message']);
    assert.equal(r.json.code, 501);
    assert.match(r.json.message, /GET \/e2b\/templates is not supported by sandlotd's E2B-compatible API/);
  });

  test('the key: wrong or missing is refused (401, E2B shape) before any route work', async () => {
    const wrong = { ...d.opts(), apiKey: `${d.token}x` };
    await assert.rejects(Sandbox.create('base', wrong), AuthenticationError);
    await assert.rejects(Sandbox.list(wrong).nextItems(), AuthenticationError);

    // A create with a wrong key and a malformed body: 401, not 400 (the
    // body was never looked at), and no sandbox.
    for (const headers of [{}, { 'X-API-KEY': 'nope' }, { 'X-Access-Token': 'nope' },
      { Authorization: `Basic ${Buffer.from('user:').toString('base64')}` }]) {
      const r = await d.tcpRequest('POST', '/e2b/v2/sandboxes', { headers, body: '{"templateID": ' });
      assert.equal(r.status, 401, JSON.stringify(headers));
      assert.equal(r.json.code, 401);
      assert.match(r.json.message, /missing or wrong API key/);
    }
    assert.equal((await d.sandboxes('all')).filter((s) => s.state === 'running').length, 0);

    // The right key in either E2B header, or as a bearer token, gets in.
    for (const headers of [{ 'X-API-KEY': d.token }, { 'X-Access-Token': d.token },
      { Authorization: `Bearer ${d.token}` }]) {
      const r = await d.tcpRequest('GET', '/e2b/v2/sandboxes', { headers });
      assert.equal(r.status, 200, JSON.stringify(headers));
    }
    // A sandbox's envdAccessToken opens the calls made inside that sandbox
    // only: not another's, not the control plane.
    const sbx = await Sandbox.create('base', { ...d.opts(), timeoutMs: 60_000 });
    const other = await Sandbox.create('base', { ...d.opts(), timeoutMs: 60_000 });
    try {
      const info = await sbx.getInfo();
      const access = sbx.envdAccessToken;
      assert.match(access, /^sbat_[0-9a-f]{64}$/);
      assert.notEqual(access, d.token);
      assert.notEqual(access, other.envdAccessToken);
      assert.equal(info.sandboxId, sbx.sandboxId);
      const inside = (id) => ({ 'X-Access-Token': access, 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49983' });
      const r = await d.tcpRequest('POST', '/e2b/process.Process/List', { headers: inside(sbx.sandboxId), body: {} });
      assert.notEqual(r.status, 401, `${r.status} ${r.body}`);
      // The code interpreter SDKs send it as E2B-Traffic-Access-Token (trafficAccessToken).
      assert.equal(sbx.trafficAccessToken, access);
      const ctx = await d.tcpRequest('GET', '/e2b/contexts', {
        headers: { 'E2B-Traffic-Access-Token': access, 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999' },
      });
      assert.notEqual(ctx.status, 401, `${ctx.status} ${ctx.body}`);
      const ctxOther = await d.tcpRequest('GET', '/e2b/contexts', {
        headers: { 'E2B-Traffic-Access-Token': access, 'E2b-Sandbox-Id': other.sandboxId, 'E2b-Sandbox-Port': '49999' },
      });
      assert.equal(ctxOther.status, 401);
      for (const [method, p, id] of [
        ['POST', '/e2b/process.Process/List', other.sandboxId],
        ['POST', '/e2b/process.Process/List', undefined],
        ['GET', `/e2b/sandboxes/${sbx.sandboxId}`, sbx.sandboxId],
        ['DELETE', `/e2b/sandboxes/${sbx.sandboxId}`, sbx.sandboxId],
        ['GET', '/e2b/v2/sandboxes', sbx.sandboxId],
      ]) {
        const headers = inside(id);
        if (id === undefined) delete headers['E2b-Sandbox-Id'];
        const x = await d.tcpRequest(method, p, { headers, body: method === 'POST' ? {} : undefined });
        assert.equal(x.status, 401, `${method} ${p} as ${id}: ${x.status} ${x.body}`);
      }
      assert.equal((await d.request('GET', `/v1/sandboxes/${sbx.sandboxId}`)).json.state, 'running');
    } finally {
      await sbx.kill();
      await other.kill();
    }

    // E2B's headers open /e2b only: /v1 still wants the bearer token.
    const v1 = await d.tcpRequest('GET', '/v1/sandboxes', { headers: { 'X-API-KEY': d.token } });
    assert.equal(v1.status, 401);
    assert.equal(v1.json.error.code, 'unauthorized');
  });
});
