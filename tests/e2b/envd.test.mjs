// E2B's in-sandbox API (envd: commands and files) with the real `e2b` npm
// SDK against sandlotd: a sandbox made with Sandbox.create() over TCP with
// the daemon's token (harness.mjs), then driven through envd's Connect RPC
// and /files under the same /e2b prefix.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  CommandExitError,
  FileType,
  FilesystemEventType,
  InvalidArgumentError,
  NotFoundError,
  Sandbox,
  TimeoutError,
} from 'e2b';

import { E2bDaemon, skipReason } from './harness.mjs';

describe('E2B envd with the e2b SDK', { skip: skipReason }, () => {
  let d;
  let sbx;

  before(async () => {
    d = await new E2bDaemon().start();
    sbx = await Sandbox.create('base', { ...d.opts(), timeoutMs: 600_000 });
  });

  after(async () => {
    if (sbx) await sbx.kill();
    if (d) await d.stop();
  });

  describe('commands', () => {
    test('run in the foreground: output streamed and collected, cwd and envs', async () => {
      const out = [];
      const err = [];
      await sbx.files.makeDir('/tmp/work-dir');
      const r = await sbx.commands.run('echo "$GREETING from $(pwd)"; echo oops >&2', {
        cwd: '/tmp/work-dir',
        envs: { GREETING: 'hello' },
        onStdout: (line) => out.push(line),
        onStderr: (line) => err.push(line),
      });
      assert.equal(r.exitCode, 0);
      assert.equal(r.stdout, 'hello from /tmp/work-dir\n');
      assert.equal(r.stderr, 'oops\n');
      assert.equal(out.join(''), 'hello from /tmp/work-dir\n');
      assert.equal(err.join(''), 'oops\n');
    });

    test('a non-zero exit raises CommandExitError with the exit code and output', async () => {
      await assert.rejects(sbx.commands.run('echo partial; exit 7'), (e) => {
        assert.ok(e instanceof CommandExitError, `${e}`);
        assert.equal(e.exitCode, 7);
        assert.equal(e.stdout, 'partial\n');
        return true;
      });
    });

    test('output larger than one event arrives whole and in order', async () => {
      const r = await sbx.commands.run('seq 1 100000');
      const lines = r.stdout.trimEnd().split('\n');
      assert.equal(lines.length, 100000);
      assert.equal(lines[0], '1');
      assert.equal(lines[99999], '100000');
    });

    test('background: listed while it runs, killed by pid; kill of an unknown pid is false', async () => {
      const h = await sbx.commands.run('sleep 600', { background: true });
      assert.ok(h.pid > 0);
      const listed = await sbx.commands.list();
      const mine = listed.find((p) => p.pid === h.pid);
      assert.ok(mine, `pid ${h.pid} not in ${JSON.stringify(listed)}`);
      assert.equal(mine.cmd, '/bin/bash');
      assert.deepEqual(mine.args, ['-l', '-c', 'sleep 600']);
      assert.equal(await sbx.commands.kill(h.pid), true);
      await assert.rejects(h.wait(), (e) => {
        assert.ok(e instanceof CommandExitError, `${e}`);
        assert.equal(e.exitCode, -1); /* killed by a signal, as envd reports it */
        return true;
      });
      assert.equal((await sbx.commands.list()).find((p) => p.pid === h.pid), undefined);
      assert.equal(await sbx.commands.kill(h.pid), false);
      assert.equal(await sbx.commands.kill(4194000), false);
    });

    test('stdin: sendStdin and closeStdin reach the command', async () => {
      const h = await sbx.commands.run('cat; echo done', { background: true, stdin: true });
      await sbx.commands.sendStdin(h.pid, 'line one\n');
      await sbx.commands.sendStdin(h.pid, new TextEncoder().encode('line two\n'));
      await sbx.commands.closeStdin(h.pid);
      const r = await h.wait();
      assert.equal(r.stdout, 'line one\nline two\ndone\n');
    });

    test('sendStdin to an unknown pid fails as not found', async () => {
      await assert.rejects(sbx.commands.sendStdin(4194000, 'x'), (e) => {
        assert.ok(e instanceof NotFoundError, `${e}`);
        assert.match(e.message, /4194000/);
        return true;
      });
    });

    test('connect: a second handle to a running command gets its later output', async () => {
      const h = await sbx.commands.run('read line; echo "got $line"', { background: true, stdin: true });
      const seen = [];
      const c = await sbx.commands.connect(h.pid, { onStdout: (l) => seen.push(l) });
      await sbx.commands.sendStdin(h.pid, 'ping\n');
      const r = await c.wait();
      assert.equal(r.exitCode, 0);
      assert.equal(seen.join(''), 'got ping\n');
      assert.equal((await h.wait()).stdout, 'got ping\n');
      await assert.rejects(sbx.commands.connect(4194000), (e) => e instanceof NotFoundError || `${e}`);
    });

    test('timeoutMs ends a command that runs too long', async () => {
      const t0 = Date.now();
      await assert.rejects(sbx.commands.run('sleep 600', { timeoutMs: 1500 }), (e) => {
        assert.ok(e instanceof TimeoutError, `${e}`);
        return true;
      });
      assert.ok(Date.now() - t0 < 60000);
      const left = await sbx.commands.run('cat /proc/[0-9]*/comm 2>/dev/null | grep -cx sleep || true');
      assert.equal(left.stdout, '0\n', 'the timed-out command is still running');
    });
  });

  describe('files', () => {
    test('write and read as text, bytes and a stream', async () => {
      const info = await sbx.files.write('notes/hello.txt', 'hello, sandlot\n');
      assert.equal(info.path, '/home/user/notes/hello.txt');
      assert.equal(info.name, 'hello.txt');
      assert.equal(await sbx.files.read('notes/hello.txt'), 'hello, sandlot\n');
      const bytes = await sbx.files.read('/home/user/notes/hello.txt', { format: 'bytes' });
      assert.deepEqual(Buffer.from(bytes), Buffer.from('hello, sandlot\n'));
      const binary = new Uint8Array(70000).map((_, i) => (i * 7) & 0xff);
      await sbx.files.write('bin/data.bin', binary.buffer);
      const stream = await sbx.files.read('bin/data.bin', { format: 'stream' });
      const chunks = [];
      for await (const c of stream) chunks.push(Buffer.from(c));
      assert.deepEqual(Buffer.concat(chunks), Buffer.from(binary));
      assert.equal(await sbx.files.read('empty.txt').catch(() => 'missing'), 'missing');
      await sbx.files.write('empty.txt', '');
      assert.equal(await sbx.files.read('empty.txt'), '');
    });

    test('write many files at once, and a streamed upload', async () => {
      const infos = await sbx.files.write([
        { path: 'many/a.txt', data: 'A' },
        { path: '/home/user/many/sub/b.bin', data: new Uint8Array([0, 1, 2, 255]) },
      ]);
      assert.deepEqual(infos.map((i) => i.path).sort(), ['/home/user/many/a.txt', '/home/user/many/sub/b.bin']);
      assert.equal(await sbx.files.read('many/a.txt'), 'A');
      assert.deepEqual([...(await sbx.files.read('many/sub/b.bin', { format: 'bytes' }))], [0, 1, 2, 255]);
      const body = new ReadableStream({
        start(ctl) {
          ctl.enqueue(new TextEncoder().encode('streamed '));
          ctl.enqueue(new TextEncoder().encode('upload'));
          ctl.close();
        },
      });
      await sbx.files.write('many/streamed.txt', body);
      assert.equal(await sbx.files.read('many/streamed.txt'), 'streamed upload');
    });

    test('list (with depth), exists, getInfo', async () => {
      await sbx.files.write([
        { path: 'tree/top.txt', data: 'x' },
        { path: 'tree/d1/mid.txt', data: 'xx' },
        { path: 'tree/d1/d2/deep.txt', data: 'xxx' },
      ]);
      const one = await sbx.files.list('tree');
      assert.deepEqual(one.map((e) => e.name).sort(), ['d1', 'top.txt']);
      const d1 = one.find((e) => e.name === 'd1');
      assert.equal(d1.type, FileType.DIR);
      assert.equal(d1.path, '/home/user/tree/d1');
      const all = await sbx.files.list('tree', { depth: 3 });
      assert.deepEqual(all.map((e) => e.path).sort(), [
        '/home/user/tree/d1',
        '/home/user/tree/d1/d2',
        '/home/user/tree/d1/d2/deep.txt',
        '/home/user/tree/d1/mid.txt',
        '/home/user/tree/top.txt',
      ]);
      assert.equal(await sbx.files.exists('tree/d1/mid.txt'), true);
      assert.equal(await sbx.files.exists('tree/nothing-here'), false);
      const info = await sbx.files.getInfo('tree/d1/d2/deep.txt');
      assert.equal(info.type, FileType.FILE);
      assert.equal(info.size, 3);
      assert.equal(info.permissions, '-rw-r--r--');
      assert.ok(info.modifiedTime instanceof Date && Math.abs(info.modifiedTime - Date.now()) < 3600e3);
      await assert.rejects(sbx.files.list('tree/top.txt'), (e) => e instanceof InvalidArgumentError || `${e}`);
      await assert.rejects(sbx.files.list('no/such/dir'), (e) => e instanceof NotFoundError || `${e}`);
    });

    test('makeDir, rename, remove', async () => {
      assert.equal(await sbx.files.makeDir('made/a/b'), true);
      assert.equal(await sbx.files.makeDir('made/a/b'), false);
      await sbx.files.write('made/a/b/f.txt', 'content');
      const moved = await sbx.files.rename('made/a/b/f.txt', 'made/elsewhere/g.txt');
      assert.equal(moved.path, '/home/user/made/elsewhere/g.txt');
      assert.equal(await sbx.files.read('made/elsewhere/g.txt'), 'content');
      assert.equal(await sbx.files.exists('made/a/b/f.txt'), false);
      await sbx.files.remove('made');
      assert.equal(await sbx.files.exists('made'), false);
      await assert.rejects(sbx.files.rename('made/none', 'made/x'), (e) => e instanceof NotFoundError || `${e}`);
      await assert.rejects(sbx.files.remove('made/none'), (e) => e instanceof NotFoundError || `${e}`);
    });

    test('bad inputs: a missing file, a directory read as a file, an unknown user', async () => {
      await assert.rejects(sbx.files.read('does/not/exist.txt'), (e) => {
        assert.ok(e instanceof NotFoundError, `${e}`);
        assert.match(e.message, /\/home\/user\/does\/not\/exist\.txt/);
        return true;
      });
      await assert.rejects(sbx.files.read('/home/user'), (e) => {
        assert.ok(e instanceof InvalidArgumentError, `${e}`);
        assert.match(e.message, /is a directory/);
        return true;
      });
      await assert.rejects(sbx.files.read('x.txt', { user: 'mallory' }), /mallory/);
    });

    test('watchDir reports creations, writes and removals under the directory', async () => {
      await sbx.files.makeDir('watched/inner');
      await sbx.files.write('outside.txt', 'not watched');
      const events = [];
      let arrived = () => {};
      const h = await sbx.files.watchDir(
        'watched',
        (e) => {
          events.push(`${e.type} ${e.name}`);
          arrived();
        },
        { recursive: true },
      );
      // Wait (bounded) until every expected event has come.
      const until = async (want) => {
        const deadline = Date.now() + 20000;
        while (!want.every((w) => events.includes(w))) {
          assert.ok(Date.now() < deadline, `waited for ${want}, have ${events}`);
          await new Promise((r) => {
            arrived = r;
            setTimeout(r, 1000);
          });
        }
      };
      await sbx.files.write('watched/new.txt', 'one');
      await sbx.commands.run('echo two >> watched/new.txt; echo x > watched/inner/deep.txt; echo y > outside2.txt');
      await until([
        `${FilesystemEventType.CREATE} new.txt`,
        `${FilesystemEventType.CREATE} inner/deep.txt`,
      ]);
      await sbx.files.remove('watched/new.txt');
      await until([`${FilesystemEventType.REMOVE} new.txt`]);
      await h.stop();
      assert.ok(!events.some((e) => e.includes('outside')), `${events}`);
      await assert.rejects(
        sbx.files.watchDir('/etc', () => {}),
        (e) => e instanceof InvalidArgumentError || `${e}`,
      );
      await assert.rejects(
        sbx.files.watchDir('watched/none', () => {}),
        (e) => e instanceof NotFoundError || `${e}`,
      );
    });

    test('a sandbox that does not exist answers as E2B does for one that is gone', async () => {
      // The SDK's object for it, as Sandbox.create() would build one.
      const ghost = new Sandbox({
        ...d.opts(),
        sandboxId: 'sb-doesnotexistdoesnotexist0',
        envdVersion: '0.5.7',
        envdAccessToken: d.token,
      });
      await assert.rejects(ghost.files.read('a.txt'), (e) => {
        assert.match(`${e.name}: ${e.message}`, /not found|timeout|not running/i);
        return true;
      });
      await assert.rejects(ghost.commands.run('true'), (e) => {
        assert.match(`${e.name}: ${e.message}`, /not found|timeout|not running|unavailable/i);
        return true;
      });
    });
  });
});
