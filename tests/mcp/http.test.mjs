// MCP over Streamable HTTP: sandlotd's /mcp under the official MCP
// TypeScript SDK client (Client + StreamableHTTPClientTransport), on its
// TCP listener with the bearer token; and the HTTP edges (status codes,
// headers, JSON or SSE answers) by plain fetch.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';

import { Daemon, skipReason, textOf, waitFor } from './harness.mjs';

const auth = (d) => ({ Authorization: `Bearer ${d.token}` });

async function connect(d, { headers } = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(`${d.url}/mcp`), {
    requestInit: { headers: headers ?? auth(d) },
  });
  const client = new Client({ name: 'sandlot-mcp-http-tests', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

// The sandboxes of MCP sessions over HTTP.
const mcpSandboxes = async (d) =>
  (await d.sandboxes()).filter((s) => s.metadata && s.metadata.client === 'sandlot-mcp-http');

// One POST of a JSON-RPC message (or batch) to /mcp.
function post(d, body, headers = {}) {
  return fetch(`${d.url}/mcp`, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      ...auth(d),
      ...headers,
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

const INIT = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'fetch', version: '1' } },
};

// A new session by hand: its id.
async function initialize(d, headers = {}) {
  const r = await post(d, INIT, { Accept: 'application/json', ...headers });
  assert.equal(r.status, 200, await r.clone().text());
  const id = r.headers.get('mcp-session-id');
  assert.match(id, /^mcp-[a-z0-9]{26}$/);
  const body = await r.json();
  assert.equal(body.result.protocolVersion, '2025-06-18');
  return id;
}

// The SSE events of a text/event-stream body: their data, parsed.
function sseMessages(text) {
  return text
    .split('\n\n')
    .map((block) => block.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n'))
    .filter((data) => data)
    .map((data) => JSON.parse(data));
}

describe('MCP over Streamable HTTP with the MCP SDK client', { skip: skipReason }, () => {
  let d, s;

  before(async () => {
    d = await new Daemon({ tcp: true }).start();
    s = await connect(d);
  });

  after(async () => {
    if (s) await s.client.close();
    if (d) await d.stop();
  });

  test('initialize: a session id, server info, tools capability, instructions', () => {
    assert.match(s.transport.sessionId, /^mcp-[a-z0-9]{26}$/);
    assert.equal(s.client.getServerVersion().name, 'sandlot');
    assert.ok(s.client.getServerCapabilities().tools);
    assert.match(s.client.getInstructions(), /\/home\/user/);
  });

  test('tools/list: the same seven tools as over stdio', async () => {
    const { tools } = await s.client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), [
      'expose_port', 'generated_files', 'list_files', 'read_file', 'run_code', 'run_command',
      'write_file',
    ]);
  });

  test('tools run in one sandbox of the session: commands, files, interpreter state', async () => {
    const w = await s.client.callTool({ name: 'write_file', arguments: { path: 'in.txt', content: 'abc\n' } });
    assert.equal(w.isError, false, textOf(w));
    const r = await s.client.callTool({ name: 'run_command', arguments: { command: 'tr a-z A-Z < in.txt' } });
    assert.equal(r.isError, false, textOf(r));
    assert.match(textOf(r), /--- stdout ---\nABC\n/);
    await s.client.callTool({ name: 'run_code', arguments: { language: 'python', code: 'x = 41' } });
    const c = await s.client.callTool({ name: 'run_code', arguments: { language: 'python', code: 'x + 1' } });
    assert.match(textOf(c), /--- result ---\n42/);
    const f = await s.client.callTool({ name: 'read_file', arguments: { path: '/home/user/in.txt' } });
    assert.equal(textOf(f), 'abc\n');
    const sbs = await mcpSandboxes(d);
    assert.equal(sbs.length, 1, JSON.stringify(sbs));
    assert.equal(sbs[0].state, 'running');
  });

  test('a failing command is a tool result with isError', async () => {
    const r = await s.client.callTool({ name: 'run_command', arguments: { command: 'exit 3' } });
    assert.equal(r.isError, true);
    assert.match(textOf(r), /exit code 3/);
  });

  test('an unknown tool is a JSON-RPC error (-32602)', async () => {
    await assert.rejects(
      s.client.callTool({ name: 'no_such_tool', arguments: {} }),
      (e) => e instanceof McpError && e.code === ErrorCode.InvalidParams,
    );
  });

  test('a long run sends notifications/progress (SSE) before its result', async () => {
    const seen = [];
    const r = await s.client.callTool(
      { name: 'run_command', arguments: { command: 'sleep 3.5; echo finished' } },
      undefined,
      { onprogress: (p) => seen.push(p), timeout: 60000 },
    );
    assert.equal(r.isError, false, textOf(r));
    assert.match(textOf(r), /finished/);
    assert.ok(seen.length >= 2, `progress notifications: ${JSON.stringify(seen)}`);
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress);
    assert.match(seen[0].message, /run_command running for \d+ s/);
  });

  test('run_code sends progress too', async () => {
    const seen = [];
    const r = await s.client.callTool(
      { name: 'run_code', arguments: { language: 'python', code: 'import time\ntime.sleep(2.5)\n"slept"' } },
      undefined,
      { onprogress: (p) => seen.push(p) },
    );
    assert.match(textOf(r), /slept/);
    assert.ok(seen.length >= 1, JSON.stringify(seen));
  });

  test('a cancelled call is stopped: its command is killed', async () => {
    const ac = new AbortController();
    let running;
    const started = new Promise((r) => (running = r));
    const call = s.client.callTool(
      { name: 'run_command', arguments: { command: 'echo $$ > pid; exec sleep 60' } },
      undefined,
      // Its first progress notification: the command runs.
      { signal: ac.signal, onprogress: () => running() },
    );
    await started;
    ac.abort();
    await assert.rejects(call);
    // notifications/cancelled reached the session: the call was abandoned
    // (the next one runs at once) and the sleep is killed.
    const t0 = Date.now();
    await waitFor(async () => {
      const r = await s.client.callTool({ name: 'run_command', arguments: { command: 'kill -0 $(cat pid)' } });
      return r.isError;
    }, 20000, 'the cancelled command to be killed');
    // Without the cancellation, the next call would wait for the sleep (60 s).
    assert.ok(Date.now() - t0 < 20000, `${Date.now() - t0} ms`);
  });

  test('a second client gets a session and a sandbox of its own', async () => {
    const other = await connect(d);
    try {
      assert.notEqual(other.transport.sessionId, s.transport.sessionId);
      const r = await other.client.callTool({ name: 'run_command', arguments: { command: 'ls in.txt' } });
      assert.equal(r.isError, true, 'the other session does not see the first one\'s files');
      assert.equal((await mcpSandboxes(d)).length, 2);
    } finally {
      await other.transport.terminateSession();
      await other.client.close();
    }
    assert.equal((await mcpSandboxes(d)).length, 1);
  });

  test('DELETE ends the session: its sandbox is deleted, its id is then unknown (404)', async () => {
    const c = await connect(d);
    const id = c.transport.sessionId;
    await c.client.callTool({ name: 'run_command', arguments: { command: 'true' } });
    const sb = (await mcpSandboxes(d)).map((x) => x.id);
    assert.equal(sb.length, 2);
    await c.transport.terminateSession();
    await c.client.close();
    // The DELETE is answered once the sandbox is gone.
    const left = (await mcpSandboxes(d)).map((x) => x.id);
    assert.equal(left.length, 1);
    const r = await post(d, { jsonrpc: '2.0', id: 2, method: 'tools/list' }, { 'Mcp-Session-Id': id });
    assert.equal(r.status, 404);
    assert.equal((await r.json()).error.code, -32001);
  });

  test('the SDK client without the token gets 401', async () => {
    await assert.rejects(connect(d, { headers: {} }), (e) => e instanceof StreamableHTTPError && e.code === 401);
    await assert.rejects(connect(d, { headers: { Authorization: 'Bearer wrong' } }),
      (e) => e instanceof StreamableHTTPError && e.code === 401);
  });

  test('a request with an unknown session id gets 404, one without any 400', async () => {
    const body = { jsonrpc: '2.0', id: 2, method: 'tools/list' };
    const r = await post(d, body, { 'Mcp-Session-Id': 'mcp-nosuchsessionnosuchsession' });
    assert.equal(r.status, 404);
    const e = await r.json();
    assert.equal(e.jsonrpc, '2.0');
    assert.match(e.error.message, /Session not found/);
    const r2 = await post(d, body);
    assert.equal(r2.status, 400);
    assert.match((await r2.json()).error.message, /Mcp-Session-Id header is required/);
  });

  test('answers as application/json or as an SSE stream, as the client accepts', async () => {
    const id = await initialize(d);
    const call = { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'list_files', arguments: {} } };
    const j = await post(d, call, { 'Mcp-Session-Id': id, Accept: 'application/json' });
    assert.equal(j.status, 200);
    assert.match(j.headers.get('content-type'), /^application\/json/);
    assert.equal((await j.json()).id, 7);
    const e = await post(d, call, { 'Mcp-Session-Id': id, Accept: 'text/event-stream' });
    assert.equal(e.status, 200);
    assert.match(e.headers.get('content-type'), /^text\/event-stream/);
    const msgs = sseMessages(await e.text());
    assert.equal(msgs.length, 1);
    assert.equal(msgs[0].id, 7);
    assert.equal(msgs[0].result.isError, false);
    // A batch: one answer per request, in one array (JSON) or one event each (SSE).
    const batch = [
      { jsonrpc: '2.0', id: 8, method: 'ping' },
      { jsonrpc: '2.0', method: 'notifications/whatever' },
      { jsonrpc: '2.0', id: 9, method: 'tools/list' },
    ];
    const bj = await (await post(d, batch, { 'Mcp-Session-Id': id, Accept: 'application/json' })).json();
    assert.deepEqual(bj.map((a) => a.id), [8, 9]);
    const be = sseMessages(await (await post(d, batch, { 'Mcp-Session-Id': id, Accept: 'text/event-stream' })).text());
    assert.deepEqual(be.map((a) => a.id), [8, 9]);
    // Only notifications: 202, no body.
    const n = await post(d, { jsonrpc: '2.0', method: 'notifications/initialized' }, { 'Mcp-Session-Id': id });
    assert.equal(n.status, 202);
    assert.equal(await n.text(), '');
    const del = await fetch(`${d.url}/mcp`, { method: 'DELETE', headers: { ...auth(d), 'Mcp-Session-Id': id } });
    assert.equal(del.status, 204);
  });

  test('HTTP errors: not JSON 400 (-32700), wrong media types 415/406, GET 405, bad protocol version 400', async () => {
    const bad = await post(d, '{"jsonrpc": "2.0", ');
    assert.equal(bad.status, 400);
    assert.equal((await bad.json()).error.code, -32700);
    const ct = await post(d, INIT, { 'Content-Type': 'text/plain' });
    assert.equal(ct.status, 415);
    const acc = await post(d, INIT, { Accept: 'text/html' });
    assert.equal(acc.status, 406);
    const get = await fetch(`${d.url}/mcp`, { headers: { ...auth(d), Accept: 'text/event-stream' } });
    assert.equal(get.status, 405);
    assert.equal(get.headers.get('allow'), 'POST, DELETE');
    const pv = await post(d, { jsonrpc: '2.0', id: 2, method: 'ping' }, { 'MCP-Protocol-Version': '1999-01-01' });
    assert.equal(pv.status, 400);
    assert.match((await pv.json()).error.message, /MCP-Protocol-Version/);
    const batchInit = await post(d, [INIT, { jsonrpc: '2.0', id: 2, method: 'ping' }]);
    assert.equal(batchInit.status, 400);
  });

  test('Origin: loopback origins pass, others get 403', async () => {
    const evil = await post(d, INIT, { Origin: 'http://evil.example' });
    assert.equal(evil.status, 403);
    const rebind = await post(d, INIT, { Origin: 'http://localhost.evil.example:8080' });
    assert.equal(rebind.status, 403);
    const id = await initialize(d, { Origin: 'http://localhost:5173' });
    const del = await fetch(`${d.url}/mcp`, {
      method: 'DELETE',
      headers: { ...auth(d), 'Mcp-Session-Id': id, Origin: 'http://evil.example' },
    });
    assert.equal(del.status, 403);
    const ok = await fetch(`${d.url}/mcp`, {
      method: 'DELETE',
      headers: { ...auth(d), 'Mcp-Session-Id': id, Origin: 'http://127.0.0.1:5173' },
    });
    assert.equal(ok.status, 204);
  });

  test('the session\'s sandbox is gone once the client has terminated it', async () => {
    await s.transport.terminateSession();
    await s.client.close();
    s = null;
    assert.deepEqual(await mcpSandboxes(d), []);
  });
});

describe('MCP over Streamable HTTP: session limits and idle expiry', { skip: skipReason }, () => {
  let d;

  before(async () => {
    d = await new Daemon({ tcp: true, args: ['--mcp-max-sessions', '2', '--mcp-idle-timeout', '3'] }).start();
  });

  after(async () => {
    if (d) await d.stop();
  });

  test('past --mcp-max-sessions, initialize gets 503', async () => {
    const a = await initialize(d);
    const b = await initialize(d);
    const r = await post(d, INIT);
    assert.equal(r.status, 503);
    assert.match((await r.json()).error.message, /too many MCP sessions/);
    for (const id of [a, b]) {
      const del = await fetch(`${d.url}/mcp`, { method: 'DELETE', headers: { ...auth(d), 'Mcp-Session-Id': id } });
      assert.equal(del.status, 204);
    }
    await initialize(d); // room again (this one expires below)
  });

  test('at most 16 requests of one session in progress or waiting: more get 429', async () => {
    const id = await initialize(d);
    const call = (n, command) => post(d, {
      jsonrpc: '2.0', id: n, method: 'tools/call', params: { name: 'run_command', arguments: { command } },
    }, { 'Mcp-Session-Id': id, Accept: 'text/event-stream' });
    // The headers of each answer come at once; the calls then run one by one.
    const first = await call(1, 'sleep 2');
    const waiting = await Promise.all(Array.from({ length: 15 }, (_, i) => call(i + 2, 'true')));
    const over = await call(99, 'true');
    assert.equal(over.status, 429);
    assert.match((await over.json()).error.message, /too many requests of this session/);
    for (const r of [first, ...waiting]) {
      assert.equal(r.status, 200);
      const [answer] = sseMessages(await r.text());
      assert.equal(answer.result.isError, false);
    }
    const del = await fetch(`${d.url}/mcp`, { method: 'DELETE', headers: { ...auth(d), 'Mcp-Session-Id': id } });
    assert.equal(del.status, 204);
  });

  test('an idle session ends after --mcp-idle-timeout and its sandbox is deleted', async () => {
    const c = await connect(d);
    const id = c.transport.sessionId;
    const r = await c.client.callTool({ name: 'run_command', arguments: { command: 'echo hi' } });
    assert.equal(r.isError, false);
    assert.equal((await mcpSandboxes(d)).length, 1);
    await waitFor(async () => (await mcpSandboxes(d)).length === 0, 20000, 'the idle session\'s sandbox to go');
    const after = await post(d, { jsonrpc: '2.0', id: 3, method: 'ping' }, { 'Mcp-Session-Id': id });
    assert.equal(after.status, 404);
    await c.client.close();
    // The session's line is written once its sandbox is deleted, which the
    // listing above can see first.
    await waitFor(async () => /event=mcp_session session=mcp-\w+ ended=idle sandbox=sb-/.test(fs.readFileSync(d.logPath, 'utf8')),
      5000, 'the idle session\'s log line');
  });

  test('a call that runs longer than the idle timeout is not cut', async () => {
    const c = await connect(d);
    const r = await c.client.callTool({ name: 'run_command', arguments: { command: 'sleep 5; echo survived' } });
    assert.equal(r.isError, false, textOf(r));
    assert.match(textOf(r), /survived/);
    await c.transport.terminateSession();
    await c.client.close();
  });

  test('sandlotd stopping ends live sessions and deletes their sandboxes', async () => {
    const c = await connect(d);
    await c.client.callTool({ name: 'run_command', arguments: { command: 'true' } });
    assert.equal((await mcpSandboxes(d)).length, 1);
    const stopped = d;
    d = null;
    await stopped.stop();
    await c.client.close();
    // The session ended before the HTTP server stopped: its sandbox was
    // deleted through the API, not left to the daemon's shutdown.
    assert.match(stopped.finalLogs, /msg="removed sandbox sb-\w+"/);
    assert.match(stopped.finalLogs, /event=mcp_session session=mcp-\w+ ended=stopping sandbox=sb-/);
  });
});
