// `sandlot mcp` driven line by line: JSON-RPC edge cases, protocol version
// negotiation, cancellation, signals, end of input, a daemon that is not
// there, a sandbox that ends under the server, keepalives.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Daemon, RawServer, skipReason, textOf, waitFor } from './harness.mjs';

describe('sandlot mcp: JSON-RPC and session edge cases', { skip: skipReason }, () => {
  let d;

  before(async () => {
    d = await new Daemon().start();
  });

  after(async () => {
    if (d) {
      await waitFor(async () => (await d.sandboxes()).length === 0, 10000, 'no sandbox left');
      await d.stop();
    }
  });

  test('malformed messages: -32700, -32600, -32601, -32602; the server goes on', async () => {
    const s = new RawServer(['-H', d.host]);
    try {
      s.send('{"jsonrpc": "2.0", "id": 1, "method": ');
      let a = await s.next();
      assert.equal(a.id, null);
      assert.equal(a.error.code, -32700);
      assert.match(a.error.message, /^parse error: /);

      s.send('not json at all');
      assert.equal((await s.next()).error.code, -32700);

      s.send('42');
      a = await s.next();
      assert.equal(a.error.code, -32600);
      assert.match(a.error.message, /a JSON-RPC message is an object/);

      s.send({ jsonrpc: '1.0', id: 2, method: 'ping' });
      a = await s.next();
      assert.equal(a.id, 2);
      assert.equal(a.error.code, -32600);
      assert.match(a.error.message, /"jsonrpc" must be "2.0"/);

      s.send({ jsonrpc: '2.0', id: true, method: 'ping' });
      a = await s.next();
      assert.equal(a.id, null);
      assert.equal(a.error.code, -32600);

      s.send({ jsonrpc: '2.0', id: 3 });
      assert.equal((await s.next()).error.code, -32600);

      s.send({ jsonrpc: '2.0', id: 4, method: 7 });
      assert.equal((await s.next()).error.code, -32600);

      a = await s.request('resources/list', {});
      assert.equal(a.error.code, -32601);
      assert.match(a.error.message, /method not found: resources\/list/);

      s.send({ jsonrpc: '2.0', id: 'str-id', method: 'tools/list', params: [1] });
      a = await s.next();
      assert.equal(a.id, 'str-id');
      assert.equal(a.error.code, -32602);

      a = await s.request('initialize', {});
      assert.equal(a.error.code, -32602);
      assert.match(a.error.message, /protocolVersion/);

      // blank lines and CRLF line ends are fine; responses to us are ignored
      s.send('');
      s.send({ jsonrpc: '2.0', id: 99, result: {} });
      s.send('{"jsonrpc":"2.0","id":"after","method":"ping"}\r');
      assert.deepEqual(await s.next(), { jsonrpc: '2.0', id: 'after', result: {} });
    } finally {
      assert.equal((await s.close()).code, 0);
    }
  });

  test('notifications get no answer; batches get an array', async () => {
    const s = new RawServer(['-H', d.host]);
    try {
      s.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
      s.send({ jsonrpc: '2.0', method: 'notifications/no-such-thing', params: { x: 1 } });
      const a = await s.request('ping');
      assert.deepEqual(a.result, {});

      s.send([
        { jsonrpc: '2.0', id: 'b1', method: 'ping' },
        { jsonrpc: '2.0', method: 'notifications/initialized' },
        { jsonrpc: '2.0', id: 'b2', method: 'nope' },
      ]);
      const batch = await s.next();
      assert.ok(Array.isArray(batch));
      assert.deepEqual(batch.map((x) => x.id), ['b1', 'b2']);
      assert.deepEqual(batch[0].result, {});
      assert.equal(batch[1].error.code, -32601);

      s.send('[]');
      assert.equal((await s.next()).error.code, -32600);
    } finally {
      await s.close();
    }
  });

  test('initialize: the version asked for when known, else the newest', async () => {
    for (const [asked, got] of [
      ['2025-11-25', '2025-11-25'],
      ['2025-06-18', '2025-06-18'],
      ['2025-03-26', '2025-03-26'],
      ['2024-11-05', '2024-11-05'],
      ['2099-01-01', '2025-11-25'],
      ['1999-01-01', '2025-11-25'],
    ]) {
      const s = new RawServer(['-H', d.host]);
      const a = await s.initialize(asked);
      assert.equal(a.result.protocolVersion, got, asked);
      assert.deepEqual(a.result.capabilities, { tools: { listChanged: false } });
      assert.equal(a.result.serverInfo.name, 'sandlot');
      await s.close();
    }
  });

  test('protocol 2025-06-18: bad arguments are JSON-RPC errors -32602', async () => {
    const s = new RawServer(['-H', d.host]);
    try {
      await s.initialize('2025-06-18');
      for (const [args, re] of [
        [{}, /run_command: missing required argument "command"/],
        [{ command: ['ls'] }, /argument "command" must be a string/],
        [{ command: 'ls', extra: 1 }, /unknown argument "extra"/],
      ]) {
        const a = await s.callTool('run_command', args);
        assert.equal(a.error?.code, -32602, JSON.stringify(a));
        assert.match(a.error.message, re);
      }
      let a = await s.request('tools/call', { name: 'run_command', arguments: 'ls' });
      assert.equal(a.error.code, -32602);
      assert.match(a.error.message, /arguments must be an object/);
      a = await s.request('tools/call', { arguments: {} });
      assert.equal(a.error.code, -32602);
      assert.match(a.error.message, /params\.name/);
      a = await s.callTool('rm_rf', {});
      assert.equal(a.error.code, -32602);
      assert.match(a.error.message, /unknown tool "rm_rf"/);
      // none of this made a sandbox
      assert.equal((await d.sandboxes()).length, 0);
      // an integral number is an integer
      a = await s.callTool('run_command', { command: 'echo ok', timeout_seconds: 5.0 });
      assert.equal(a.result.isError, false);
    } finally {
      await s.close();
    }
  });

  test('closing stdin: queued requests are answered, then the sandbox is removed', async () => {
    const s = new RawServer(['-H', d.host]);
    s.send({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18' } });
    s.send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'run_command', arguments: { command: 'sleep 1; echo late' } } });
    s.send({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'run_command', arguments: { command: 'echo last' } } });
    const exit = s.close();
    assert.equal((await s.next()).id, 1);
    const a2 = await s.next();
    assert.equal(a2.id, 2);
    assert.match(textOf(a2.result), /late/);
    const a3 = await s.next();
    assert.match(textOf(a3.result), /last/);
    assert.equal((await exit).code, 0);
    assert.equal((await d.sandboxes()).length, 0);
    assert.match(s.stderr, /created sandbox (sb-\S+)[\s\S]*removed sandbox \1/);
  });

  test('SIGTERM during a call: the command is killed and the sandbox removed at once', async () => {
    const s = new RawServer(['-H', d.host]);
    await s.initialize();
    s.send({ jsonrpc: '2.0', id: 'long', method: 'tools/call', params: { name: 'run_command', arguments: { command: 'sleep 60' } } });
    await waitFor(async () => (await d.sandboxes()).length === 1, 10000, 'the sandbox');
    const sb = (await d.sandboxes())[0].id;
    await waitFor(async () => {
      const r = await d.request('GET', `/v1/sandboxes/${sb}/execs`);
      return r.json.execs.some((e) => e.state === 'running');
    }, 10000, 'the command to run');
    const t0 = Date.now();
    s.proc.kill('SIGTERM');
    const { code } = await s.wait();
    assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
    assert.equal(code, 0);
    assert.equal((await d.sandboxes()).length, 0);
    assert.match(s.stderr, /ending the session/);
    assert.equal(s.messages.length, 0);   // no answer to the abandoned call
  });

  test('notifications/cancelled stops the running call; a ping is answered meanwhile', async () => {
    const s = new RawServer(['-H', d.host]);
    try {
      await s.initialize();
      s.send({ jsonrpc: '2.0', id: 'slow', method: 'tools/call', params: { name: 'run_command', arguments: { command: 'sleep 60' } } });
      await waitFor(async () => (await d.sandboxes()).length === 1, 10000, 'the sandbox');
      const sb = (await d.sandboxes())[0].id;
      await waitFor(async () => {
        const r = await d.request('GET', `/v1/sandboxes/${sb}/execs`);
        return r.json.execs.some((e) => e.state === 'running');
      }, 10000, 'the command to run');
      const t0 = Date.now();
      s.send({ jsonrpc: '2.0', id: 'p', method: 'ping' });
      assert.deepEqual(await s.next(), { jsonrpc: '2.0', id: 'p', result: {} });
      assert.ok(Date.now() - t0 < 2000);
      s.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'slow', reason: 'test' } });
      // the next answer is to the next request: none for the cancelled one
      const a = await s.callTool('run_command', { command: 'echo next' });
      assert.match(textOf(a.result), /next/);
      assert.ok(Date.now() - t0 < 10000);
      // the daemon killed the cancelled command
      await waitFor(async () => {
        const r = await d.request('GET', `/v1/sandboxes/${sb}/execs`);
        return r.json.execs.every((e) => e.state === 'exited');
      }, 10000, 'the cancelled command to be killed');
      // a cancelled run_code cell is interrupted, the interpreter keeps its state
      await s.callTool('run_code', { language: 'python', code: 'kept = 5' });
      s.send({ jsonrpc: '2.0', id: 'cell', method: 'tools/call', params: { name: 'run_code', arguments: { language: 'python', code: 'import time\ntime.sleep(60)' } } });
      await waitFor(async () => {
        const r = await d.request('GET', `/v1/sandboxes/${sb}/contexts`);
        return r.json.contexts.some((c) => c.language === 'python' && c.busy);
      }, 10000, 'the cell to run');
      s.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'cell' } });
      const b = await s.callTool('run_code', { language: 'python', code: 'kept * 2' }, 20000);
      assert.match(textOf(b.result), /--- result ---\n10\n/);
    } finally {
      await s.close();
    }
  });

  test('a sandbox that ended under the server is replaced, and the result says so', async () => {
    const s = new RawServer(['-H', d.host]);
    try {
      await s.initialize();
      await s.callTool('write_file', { path: 'a.txt', content: 'x' });
      const [old] = await d.sandboxes();
      assert.equal((await d.request('DELETE', `/v1/sandboxes/${old.id}`)).status, 204);
      const a = await s.callTool('run_command', { command: 'ls' });
      assert.equal(a.result.isError, false);
      assert.match(a.result.content[0].text, new RegExp(`^Note: the session's sandbox ${old.id} had ended .*files and interpreter state from before are gone`));
      assert.match(textOf(a.result), /\(no output\)/);
      const list = await d.sandboxes();
      assert.equal(list.length, 1);
      assert.notEqual(list[0].id, old.id);
    } finally {
      await s.close();
    }
  });

  test('options reach the sandbox: --memory, --env, --ttl, --idle-timeout, --timeout', async () => {
    const s = new RawServer(['-H', d.host, '--memory', '256M', '-e', 'FOO=bar', '--ttl', '1h',
      '--idle-timeout', '2m', '--timeout', '1s']);
    try {
      await s.initialize();
      const a = await s.callTool('run_command', { command: 'echo $FOO; sleep 5' });
      assert.match(textOf(a.result), /timed out after 1 s/);
      assert.match(textOf(a.result), /bar/);
      const [sb] = await d.sandboxes();
      assert.equal(sb.options.memory, 256 * 1024 * 1024);
      assert.equal(sb.ttl_seconds, 3600);
      assert.equal(sb.idle_timeout_seconds, 120);
    } finally {
      await s.close();
    }
  });

  test('keepalives hold the sandbox past its idle timeout while the server lives', async () => {
    const s = new RawServer(['-H', d.host, '--idle-timeout', '2s']);
    try {
      await s.initialize();
      await s.callTool('write_file', { path: 'keep.txt', content: 'kept' });
      const [sb] = await d.sandboxes();
      // No call of ours until the server's keepalives have moved the sandbox's last activity a
      // second past the point where it would have expired without them (a GET of the sandbox
      // is not activity).
      const at = (t) => Date.parse(t);
      await waitFor(async () => {
        const r = await d.request('GET', `/v1/sandboxes/${sb.id}`);
        assert.equal(r.json.state, 'running');
        return at(r.json.last_active_at) >= at(sb.last_active_at) + 3000;
      }, 15000, 'a keepalive past the idle timeout');
      const a = await s.callTool('read_file', { path: 'keep.txt' });
      assert.deepEqual(a.result.content, [{ type: 'text', text: 'kept' }]);
      assert.equal((await d.sandboxes())[0].id, sb.id);
    } finally {
      await s.close();
    }
  });

  test('a server killed with SIGKILL leaves its sandbox only until the idle timeout', async () => {
    const s = new RawServer(['-H', d.host, '--idle-timeout', '2s']);
    await s.initialize();
    await s.callTool('run_command', { command: 'true' });
    assert.equal((await d.sandboxes()).length, 1);
    s.proc.kill('SIGKILL');
    await s.wait();
    await waitFor(async () => (await d.sandboxes()).length === 0, 15000, 'the idle sandbox to expire');
  });

  test('no daemon: a clear error naming the socket and how to start sandlotd, exit 125', async () => {
    const s = new RawServer(['-H', 'unix:/var/tmp/no-such-sandlotd.sock']);
    const { code } = await s.close();
    assert.equal(code, 125);
    assert.match(s.stderr, /cannot reach sandlotd at unix:\/var\/tmp\/no-such-sandlotd\.sock: No such file or directory \(is it running\? start it with: sandlotd\)/);
    assert.equal(s.messages.length, 0);
  });

  test('bad command-line arguments: exit 2 with the reason', async () => {
    for (const [args, re] of [
      [['--memory', 'lots'], /--memory: invalid size "lots"/],
      [['--timeout', '0'], /invalid --timeout "0"/],
      [['--frobnicate'], /unknown option --frobnicate/],
      [['-e', 'NOEQUALS'], /invalid --env "NOEQUALS"/],
      [['extra'], /unexpected argument "extra"/],
      [['-H', 'ftp://x'], /invalid host "ftp:\/\/x"/],
    ]) {
      const s = new RawServer(args);
      const { code } = await s.close();
      assert.equal(code, 2, args.join(' '));
      assert.match(s.stderr, re);
    }
  });
});
