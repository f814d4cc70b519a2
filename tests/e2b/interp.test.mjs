// The code interpreter (runCode, contexts) with the real
// `@e2b/code-interpreter` npm SDK against sandlotd (harness.mjs): its
// Sandbox.create() (template code-interpreter-v1) over TCP with the token.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Sandbox } from '@e2b/code-interpreter';
import { NotFoundError, SandboxError } from 'e2b';

import { E2bDaemon, skipReason } from './harness.mjs';

const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

describe('E2B code interpreter with @e2b/code-interpreter', { skip: skipReason }, () => {
  let d;
  let sbx;

  before(async () => {
    d = await new E2bDaemon().start();
    sbx = await Sandbox.create({ ...d.opts(), timeoutMs: 600_000 });
  });

  after(async () => {
    if (sbx) await sbx.kill();
    if (d) await d.stop();
  });

  test('Python: state kept across calls, onStdout, the value as the main result', async () => {
    await sbx.runCode('counter = 40');
    const lines = [];
    const e = await sbx.runCode('print("adding"); counter += 2\ncounter', {
      onStdout: (m) => lines.push(m.line),
    });
    assert.equal(e.error, undefined);
    assert.equal(e.text, '42');
    assert.deepEqual(e.logs.stdout, ['adding\n']);
    assert.deepEqual(lines, ['adding\n']);
    assert.ok(e.executionCount >= 2);
  });

  test('Python: a matplotlib chart comes back as a PNG result', async () => {
    const e = await sbx.runCode(
      'import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.title("squares")\nplt.show()',
    );
    assert.equal(e.error, undefined);
    const charts = e.results.filter((r) => r.png);
    assert.equal(charts.length, 1);
    assert.equal(charts[0].isMainResult, false);
    assert.deepEqual(Buffer.from(charts[0].png, 'base64').subarray(0, 8), PNG_MAGIC);
  });

  test('Python: an error has its name, value and traceback', async () => {
    const errors = [];
    const e = await sbx.runCode('def f():\n    raise ValueError("bad value")\nf()', {
      onError: (err) => errors.push(err),
    });
    assert.equal(e.error.name, 'ValueError');
    assert.equal(e.error.value, 'bad value');
    assert.match(e.error.traceback, /line 2, in f/);
    assert.match(e.error.traceback, /ValueError: bad value/);
    assert.equal(errors.length, 1);
  });

  test('JavaScript keeps its state too', async () => {
    await sbx.runCode('let total = 5', { language: 'js' });
    const e = await sbx.runCode('total * 2', { language: 'javascript' });
    assert.equal(e.error, undefined);
    assert.equal(e.text, '10');
    const bad = await sbx.runCode('undefinedThing.x', { language: 'js' });
    assert.equal(bad.error.name, 'ReferenceError');
  });

  test('contexts: separate state, listed, restarted, removed', async () => {
    const ctx = await sbx.createCodeContext({ language: 'python' });
    assert.equal(ctx.language, 'python');
    await sbx.runCode('secret = 7', { context: ctx });
    assert.equal((await sbx.runCode('secret', { context: ctx })).text, '7');
    assert.equal((await sbx.runCode('"secret" in globals()')).text, 'False');
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
    await sbx.restartCodeContext(ctx);
    assert.equal((await sbx.runCode('"secret" in globals()', { context: ctx })).text, 'False');
    await sbx.removeCodeContext(ctx);
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
    // (a short requestTimeoutMs: the SDK leaves its request timer running
    // when it throws for an error status, and node waits for it at exit)
    await assert.rejects(sbx.runCode('1', { context: ctx, requestTimeoutMs: 3000 }), (e) => {
      assert.ok(e instanceof NotFoundError, `${e}`);
      assert.match(e.message, /no context/);
      return true;
    });
  });

  test('bad inputs: a language sandlotd has no interpreter for', async () => {
    // The SDK shows only the status of a 400; the body names the language.
    await assert.rejects(sbx.runCode('1', { language: 'cobol', requestTimeoutMs: 3000 }), (e) => {
      assert.ok(e instanceof SandboxError, `${e}`);
      assert.match(e.message, /^400/);
      return true;
    });
    const raw = await fetch(`${d.opts().sandboxUrl}/execute`, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json',
        'E2b-Sandbox-Id': sbx.sandboxId,
        'E2b-Sandbox-Port': '49999',
        'X-Access-Token': d.token,
      },
      body: JSON.stringify({ code: '1', language: 'cobol' }),
    });
    assert.equal(raw.status, 400);
    assert.match((await raw.json()).message, /language cobol is not supported/);
  });
});
