// sandlot interpreter host: a stateful JavaScript context (Node.js >= 18).
//
// Runs inside a sandbox as an ordinary process, started as   node -e "<this file's text>"
// and speaks the line-based JSON protocol of spec/interpreter.md over its stdin/stdout.  Only
// node's own modules are used (acorn, which node ships for its REPL, is borrowed for the cell
// rewrite).  Keep this file under 100 KiB: it travels as one argv string (Linux caps one argument
// at 128 KiB).
(() => {
'use strict';

const fs = require('fs');
const vm = require('vm');
const util = require('util');
const path = require('path');
const os = require('os');
const net = require('net');
const { Writable } = require('stream');
const { Worker } = require('worker_threads');

const PROTOCOL = 1;
const MAX_LINE = 1 << 20;     // bytes in one protocol line, newline included
const PART_CHARS = 400000;    // characters of an oversized message's JSON text per "part" line
const VALUE_MAX = 1 << 20;    // characters kept of a result's "value"
const MAX_ID = 1024;          // characters in a request id
const ID_BYTES = 4096;
const C = fs.constants;

// Everything the host needs is captured now: cells share this global object and may overwrite
// process.exit, JSON, console, ... without breaking the host.
const proc = process;
const exit = process.exit.bind(process);
const hrnow = () => Number(process.hrtime.bigint()) / 1e6;
const stringify = JSON.stringify;
const parseJSON = JSON.parse;
const inspect = util.inspect;
const hostFile = (() => {
  const m = /\((.*):\d+:\d+\)\s*$/m.exec(String(new Error().stack).split('\n')[1] || '');
  return m ? m[1] : '[eval]';
})();

// ---------------------------------------------------------------------------------------------
// Shared memory with the worker thread: a lock for protocol writes, sentinel counters, the id
// that captured output is attributed to, and what the interrupt escalation needs to know.
//   i32[0] lock   i32[1] stdout sentinels seen   i32[2] stderr sentinels seen
//   i32[3] id generation   i32[4] id length in bytes (-1: none)   bytes 64.. id (UTF-8)
//   i32[5] running cell (0: none)   i32[6] cell whose synchronous part runs now (0: none)
//   i32[8] SIGINTs the signal worker caught   i32[9] SIGINTs the main thread has dealt with
//   i32[10] > 0 while the main thread runs host code   i32[11] signal worker ready
//   i32[12] JavaScript executions the signal worker has stopped
//   f64 at 64 + ID_BYTES: deadline (Date.now() ms) of the running cell's asynchronous part, 0: none
const sab = new SharedArrayBuffer(64 + ID_BYTES + 8);
const shared = new Int32Array(sab, 0, 16);
const idBytes = new Uint8Array(sab, 64, ID_BYTES);
const deadlineSlot = new Float64Array(sab, 64 + ID_BYTES, 1);
shared[10] = 1; // host code until the request loop is idle (see IN_HOST)
const sleeper = new Int32Array(new SharedArrayBuffer(4));
shared[4] = -1;

const RUNNING = 5;
const SYNC = 6;
const SIG_SEEN = 8;
const SIG_HANDLED = 9;
const IN_HOST = 10;
const SIGNALS_READY = 11;
const TERMINATIONS = 12;
const hostEnter = () => Atomics.add(shared, IN_HOST, 1);
const hostLeave = () => Atomics.sub(shared, IN_HOST, 1);

function lock() {
  while (Atomics.compareExchange(shared, 0, 0, 1) !== 0) Atomics.wait(shared, 0, 1, 50);
}
function unlock() {
  Atomics.store(shared, 0, 0);
  Atomics.notify(shared, 0, 1);
}

function writeAllSync(fd, buf) {
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(fd, buf, off, buf.length - off);
    } catch (e) {
      if (e.code === 'EAGAIN') { Atomics.wait(sleeper, 0, 0, 1); continue; }
      throw e;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Descriptors.  The protocol moves to private descriptors -- given by the launching shell, or new
// opens of the same pipes through /proc/self/fd (node has no dup()); fd 0 becomes /dev/null;
// fd 1 and fd 2 become FIFOs that a worker thread reads and frames, so output of child processes
// and native code is captured too.
let protoIn = 0;
let protoOut = 1;
let capture = false;
let readFds = null;
const fdsArg = process.argv.findIndex((a) => /^sandlot-fds=\d+,\d+$/.test(a));
if (fdsArg > 0) {
  // Launched as  sh -c 'exec node -e "$0" sandlot-fds=3,4 3<&0 4>&1' SOURCE : the shell did the
  // dup() that node lacks (node closes these descriptors in the processes it spawns).
  const [a, b] = process.argv[fdsArg].slice('sandlot-fds='.length).split(',').map(Number);
  process.argv.splice(fdsArg, 1);
  try {
    fs.fstatSync(a);
    fs.fstatSync(b);
    protoIn = a;
    protoOut = b;
  } catch (e) { /* not open: fall through to /proc */ }
}
if (protoOut === 1) {
  try {
    // New opens of the same pipes (works when the pipes belong to this user).
    protoIn = fs.openSync('/proc/self/fd/0', C.O_RDONLY);
    protoOut = fs.openSync('/proc/self/fd/1', C.O_WRONLY | C.O_APPEND); // a file: no rewind
  } catch (e) {
    protoIn = 0;
    protoOut = 1;
  }
}
function moveTo(fd, file, flags) {
  fs.closeSync(fd);
  if (fs.openSync(file, flags) !== fd) throw new Error(`fd ${fd} not reused`);
}
if (protoOut !== 1) {
  try { moveTo(0, '/dev/null', C.O_RDONLY); } catch (e) { /* */ }
  let dir = null;
  try {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandlot-js-'));
    const f1 = path.join(dir, '1');
    const f2 = path.join(dir, '2');
    require('child_process').execFileSync('mkfifo', ['-m', '600', f1, f2], { stdio: 'ignore' });
    const r1 = fs.openSync(f1, C.O_RDONLY | C.O_NONBLOCK);
    const r2 = fs.openSync(f2, C.O_RDONLY | C.O_NONBLOCK);
    moveTo(1, f1, C.O_WRONLY);
    moveTo(2, f2, C.O_WRONLY);
    readFds = [r1, r2];
    capture = true;
  } catch (e) {
    capture = false;
  } finally {
    if (dir) {
      for (const f of ['1', '2']) { try { fs.unlinkSync(path.join(dir, f)); } catch (e) { /* */ } }
      try { fs.rmdirSync(dir); } catch (e) { /* */ }
    }
  }
  if (!capture) {
    // No FIFOs: JS-level output is still framed (below), output of child processes is discarded
    // rather than written into the protocol stream.
    for (const fd of [1, 2]) { try { moveTo(fd, '/dev/null', C.O_WRONLY); } catch (e) { /* */ } }
  }
}

// A random marker written to fd 1/2 at the end of a cell: when the worker has seen it, every byte
// written before it has been framed.
const marker = Buffer.from('\u0000sandlot-' + require('crypto').randomBytes(12).toString('hex') + '\u0000', 'latin1');

// ---------------------------------------------------------------------------------------------
// Protocol output

function toAscii(text) {
  return text.replace(/[\u007f-\uffff]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
}

function sendLocked(msg) {
  const line = stringify(msg);
  const buf = Buffer.from(line + '\n', 'utf8');
  try {
    if (buf.length <= MAX_LINE) {
      writeAllSync(protoOut, buf);
      return;
    }
    const text = toAscii(line);
    for (let i = 0; i < text.length; i += PART_CHARS) {
      const part = { id: msg.id, type: 'part', data: text.slice(i, i + PART_CHARS), more: i + PART_CHARS < text.length };
      writeAllSync(protoOut, Buffer.from(stringify(part) + '\n', 'utf8'));
    }
  } catch (e) {
    exit(0); // the reader is gone: nobody to serve
  }
}

function send(msg) {
  hostEnter();
  lock();
  try { sendLocked(msg); } finally { unlock(); hostLeave(); }
}

function setOutputId(id) {
  lock();
  try {
    if (id === null) {
      shared[4] = -1;
    } else {
      const n = Buffer.from(idBytes.buffer, 64, ID_BYTES).write(id, 'utf8');
      shared[4] = n;
    }
    shared[3] += 1;
  } finally { unlock(); }
}

let outputId = null;

// Fallback when fd 1/2 could not be redirected: JS-level writes are framed directly (output of
// child processes then goes to the real stdout: see spec/interpreter.md, "Limits").
const fallbackDecoders = [new util.TextDecoder('utf-8'), new util.TextDecoder('utf-8')];
function frameDirect(i, buf) {
  const text = fallbackDecoders[i].decode(buf, { stream: true });
  if (text && outputId !== null) send({ id: outputId, type: i ? 'stderr' : 'stdout', data: text });
}

const WORKER_SRC = `
const { workerData: W } = require('worker_threads');
const fs = require('fs');
const net = require('net');
const shared = new Int32Array(W.sab, 0, 16);
const idBuf = Buffer.from(W.sab, 64, W.idBytes);
const marker = Buffer.from(W.marker, 'latin1');
const sleeper = new Int32Array(new SharedArrayBuffer(4));
let gen = -1, id = null;
function lock() { while (Atomics.compareExchange(shared, 0, 0, 1) !== 0) Atomics.wait(shared, 0, 1, 50); }
function unlock() { Atomics.store(shared, 0, 0); Atomics.notify(shared, 0, 1); }
function writeAll(fd, buf) {
  let off = 0;
  while (off < buf.length) {
    try { off += fs.writeSync(fd, buf, off, buf.length - off); }
    catch (e) { if (e.code === 'EAGAIN') { Atomics.wait(sleeper, 0, 0, 1); continue; } process.exit(0); }
  }
}
function frame(i, text) {
  if (!text) return;
  lock();
  try {
    if (shared[3] !== gen) { gen = shared[3]; id = shared[4] < 0 ? null : idBuf.toString('utf8', 0, shared[4]); }
    if (id !== null) writeAll(W.protoOut, Buffer.from(JSON.stringify({ id, type: i ? 'stderr' : 'stdout', data: text }) + '\\n', 'utf8'));
  } finally { unlock(); }
}
function partialMarker(buf) {
  for (let k = Math.min(buf.length, marker.length - 1); k > 0; k--) {
    if (buf.compare(marker, 0, k, buf.length - k, buf.length) === 0) return k;
  }
  return 0;
}
W.fds.forEach((fd, i) => {
  const dec = new TextDecoder('utf-8');
  let carry = null;
  const sock = new net.Socket({ fd, readable: true, writable: false });
  sock.on('data', (chunk) => {
    let buf = carry ? Buffer.concat([carry, chunk]) : chunk;
    carry = null;
    for (;;) {
      const at = buf.indexOf(marker);
      if (at >= 0) {
        frame(i, dec.decode(buf.subarray(0, at), { stream: true }) + dec.decode());
        Atomics.add(shared, 1 + i, 1);
        Atomics.notify(shared, 1 + i);
        buf = buf.subarray(at + marker.length);
        continue;
      }
      const keep = partialMarker(buf);
      frame(i, dec.decode(buf.subarray(0, buf.length - keep), { stream: true }));
      if (keep) carry = Buffer.from(buf.subarray(buf.length - keep));
      break;
    }
  });
  sock.on('error', () => {});
});
`;

let worker = null;
if (capture) {
  worker = new Worker(WORKER_SRC, {
    eval: true,
    workerData: { sab, idBytes: ID_BYTES, marker: marker.toString('latin1'), fds: readFds, protoOut },
    stdout: true,
    stderr: true,
  });
  worker.unref();
  worker.on('error', () => { capture = false; });
}

// ---------------------------------------------------------------------------------------------
// Interrupts.  node's vm breakOnSigint interrupts synchronous code: SIGINT goes to the most
// recently started breakOnSigint run (node's SigintWatchdogHelper).  A second worker, the
// "signal worker", keeps a breakOnSigint run open at all times (outer), and catches signals in a
// nested run (inner):
//  - while a cell's synchronous part runs, the cell's own run is the most recent: SIGINT
//    interrupts it (ERR_SCRIPT_EXECUTION_INTERRUPTED), exactly as in node's REPL;
//  - otherwise (idle, or the cell waits on promises) the signal worker catches it and posts
//    "sigint" to the main thread, which abandons the waiting cell;
//  - if the main thread does not deal with it within GRACE ms, it is stuck in JavaScript outside
//    any breakOnSigint run (a loop after an await, a timer callback): the signal worker stops
//    that JavaScript through the inspector (Runtime.terminateExecution) -- never while the main
//    thread is in host code -- and the main thread then handles the SIGINT as usual.  The same
//    escalation applies to a cell whose asynchronous part overran its deadline.
// Because a breakOnSigint run is always open, SIGINT never falls back to node's exit-on-SIGINT
// handler, and a cell's breakOnSigint costs a list insertion instead of a watchdog thread.
const SIGNAL_SRC = `
const { workerData: W, parentPort } = require('worker_threads');
const vm = require('vm');
const shared = new Int32Array(W.sab, 0, 16);
const deadline = new Float64Array(W.sab, 64 + W.idBytes, 1);
const GRACE = 250;
let pendingSince = 0, resentFor = 0, terminatedFor = 0, deadlineDoneFor = 0;
function deadlineDue() {
  const run = Atomics.load(shared, 5), d = deadline[0];
  return run !== 0 && d > 0 && deadlineDoneFor !== run && Date.now() > d + GRACE;
}
function hostIdle() { return Atomics.load(shared, 10) === 0 && Atomics.load(shared, 0) === 0 && Atomics.load(shared, 6) === 0; }
function terminateMain() {
  Atomics.add(shared, 12, 1);
  try {
    const inspector = require('inspector');
    const session = new inspector.Session();
    session.connectToMainThread();
    session.post('Runtime.terminateExecution');
    session.disconnect();
  } catch (e) { /* no inspector in this node: killing the host is the last resort */ }
}
function caught() {
  Atomics.add(shared, 8, 1);
  pendingSince = Date.now();
  parentPort.postMessage('sigint');
}
function act() {
  const seen = Atomics.load(shared, 8);
  if (seen > Atomics.load(shared, 9)) {
    if (Atomics.load(shared, 6) !== 0) {
      if (resentFor < seen) { resentFor = seen; process.kill(process.pid, 'SIGINT'); }  // for the cell's own run
    } else if (terminatedFor < seen && Date.now() - pendingSince >= GRACE && hostIdle()) {
      terminatedFor = seen;
      terminateMain();
    }
  }
  if (deadlineDue() && hostIdle()) {
    deadlineDoneFor = Atomics.load(shared, 5);
    terminateMain();
  }
}
function busy() {
  const seen = Atomics.load(shared, 8);
  return (seen > Atomics.load(shared, 9) && terminatedFor < seen) || deadlineDue();
}
globalThis.__sandlot = { shared, deadlineDue, caught, act, busy };
const INNER = 'for (;;) { Atomics.wait(__sandlot.shared, 7, 0, 50); if (__sandlot.deadlineDue()) break; }';
const OUTER = 'for (;;) { if (__sandlot.busy()) { Atomics.wait(__sandlot.shared, 7, 0, 20); } else { ' +
  'try { __sandlot.run(); } catch (e) { __sandlot.caught(); } } __sandlot.act(); }';
globalThis.__sandlot.run = () => vm.runInThisContext(INNER, { breakOnSigint: true });
Atomics.store(shared, 11, 1);
Atomics.notify(shared, 11);
for (;;) {
  try { vm.runInThisContext(OUTER, { breakOnSigint: true }); } catch (e) { __sandlot.caught(); }
}
`;

// Stopping JavaScript inside a timer or I/O callback leaves node's async-hooks stack unbalanced,
// which node's sanity check turns into an abort; switch that check off (what the CLI flag
// --no-force-async-hooks-checks does) so that the escalation above leaves a working host.
try {
  const quiet = process.noDeprecation;
  process.noDeprecation = true;
  const asyncWrap = process.binding('async_wrap');
  process.noDeprecation = quiet;
  asyncWrap.async_hook_fields[asyncWrap.constants.kCheck] = 0;
} catch (e) { /* the escalation may then end the host: the daemon reports the state lost */ }

let signalWorker = null;
try {
  signalWorker = new Worker(SIGNAL_SRC, { eval: true, workerData: { sab, idBytes: ID_BYTES }, stdout: true, stderr: true });
  signalWorker.unref();
  signalWorker.on('message', () => {
    hostEnter();
    try {
      Atomics.store(shared, SIG_HANDLED, Atomics.load(shared, SIG_SEEN));
      const cell = current;
      if (cell && cell.reject) {
        cell.interrupted = true;
        cell.reject(new Interrupt('interrupted'));
      }
    } finally { hostLeave(); }
  });
  signalWorker.on('error', () => {});
  // The host must not answer before a breakOnSigint run is open: until then SIGINT ends node.
  const until = hrnow() + 10000;
  while (Atomics.load(shared, SIGNALS_READY) === 0 && hrnow() < until) Atomics.wait(shared, SIGNALS_READY, 0, 50);
  if (Atomics.load(shared, SIGNALS_READY) === 0) throw new Error('the signal worker did not start');
} catch (e) {
  if (signalWorker) signalWorker.terminate();
  signalWorker = null;
}
if (signalWorker === null) {
  // Fallback (no worker threads): node's REPL arrangement; a stuck callback cannot be stopped.
  process.on('SIGINT', () => {
    const cell = current;
    if (cell && cell.reject) { cell.interrupted = true; cell.reject(new Interrupt('interrupted')); }
  });
}

function writeOut(i, chunk, encoding) {
  let buf;
  if (typeof chunk === 'string') buf = Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8');
  else if (ArrayBuffer.isView(chunk)) buf = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  else throw new TypeError('The "chunk" argument must be of type string or an instance of Buffer or Uint8Array');
  if (capture) writeAllSync(1 + i, buf);
  else frameDirect(i, buf);
}

// Drain: everything written to fd 1/2 so far is framed before the next protocol message.
function drain() {
  if (!capture) return;
  const want = [0, 0];
  for (let i = 0; i < 2; i++) {
    want[i] = Atomics.load(shared, 1 + i) + 1;
    try { writeAllSync(1 + i, marker); } catch (e) { want[i] = -1; }
  }
  const deadline = hrnow() + 30000;
  for (let i = 0; i < 2; i++) {
    while (want[i] > 0 && Atomics.load(shared, 1 + i) < want[i] && hrnow() < deadline) {
      Atomics.wait(shared, 1 + i, want[i] - 1, 100);
    }
  }
}

function makeStream(i) {
  const w = new Writable({
    decodeStrings: false,
    write(chunk, encoding, cb) {
      try { writeOut(i, chunk, encoding); cb(); } catch (e) { cb(e); }
    },
  });
  w.write = function write(chunk, encoding, cb) {
    if (typeof encoding === 'function') { cb = encoding; encoding = undefined; }
    writeOut(i, chunk, encoding);
    if (typeof cb === 'function') proc.nextTick(cb);
    return true;
  };
  w.fd = 1 + i;
  w.isTTY = false;
  w._isStdio = true;
  w.destroySoon = w.destroy;
  w._destroy = (err, cb) => cb(err);
  return w;
}

const stdoutStream = makeStream(0);
const stderrStream = makeStream(1);
Object.defineProperty(process, 'stdout', { configurable: true, enumerable: true, get: () => stdoutStream });
Object.defineProperty(process, 'stderr', { configurable: true, enumerable: true, get: () => stderrStream });
{
  const hostConsole = new console.Console({ stdout: stdoutStream, stderr: stderrStream, colorMode: false });
  hostConsole.Console = console.Console;
  globalThis.console = hostConsole;
}

// Node warns once that USE_MAIN_CONTEXT_DEFAULT_LOADER (dynamic import() in cells) is experimental.
{
  const emitWarning = process.emitWarning;
  process.emitWarning = function (warning, ...rest) {
    const text = String(warning && warning.message !== undefined ? warning.message : warning);
    if (/USE_MAIN_CONTEXT_DEFAULT_LOADER/.test(text)) return undefined;
    return emitWarning.call(this, warning, ...rest);
  };
}
const DYNAMIC_IMPORT = vm.constants && vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER;

// ---------------------------------------------------------------------------------------------
// Rich output

const DISPLAY = Symbol.for('Jupyter.display');
const BINARY = new Set(['image/png', 'image/jpeg', 'image/gif', 'application/pdf']);

function normMime(mime, v) {
  if (v === undefined || v === null) return undefined;
  if (mime === 'application/json') {
    try { return parseJSON(stringify(v)); } catch (e) { return undefined; }
  }
  if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer) {
    const b = Buffer.from(v instanceof ArrayBuffer ? v : v.buffer, v.byteOffset || 0, v.byteLength);
    return BINARY.has(mime) || !mime.startsWith('text/') ? b.toString('base64') : b.toString('utf8');
  }
  return typeof v === 'string' ? v : String(v);
}

function normBundle(obj) {
  const out = {};
  if (obj && typeof obj === 'object') {
    for (const k of Object.keys(obj)) {
      const v = normMime(k, obj[k]);
      if (v !== undefined) out[k] = v;
    }
  }
  return out;
}

function richBundle(value) {
  if (value === null || (typeof value !== 'object' && typeof value !== 'function')) return {};
  let fn;
  try { fn = value[DISPLAY]; } catch (e) { return {}; }
  if (typeof fn !== 'function') return {};
  try {
    const b = normBundle(fn.call(value));
    delete b['text/plain'];
    return b;
  } catch (e) { return {}; }
}

function pngSize(b64) {
  try {
    const h = Buffer.from(String(b64).slice(0, 44), 'base64');
    if (h.length >= 24 && h.toString('latin1', 1, 4) === 'PNG' && h.toString('latin1', 12, 16) === 'IHDR') {
      return { width: h.readUInt32BE(16), height: h.readUInt32BE(20) };
    }
  } catch (e) { /* */ }
  return null;
}

function emitDisplay(bundle, metadata) {
  const md = {};
  if (typeof bundle['image/png'] === 'string') {
    const size = pngSize(bundle['image/png']);
    if (size) md['image/png'] = size;
  }
  if (metadata && typeof metadata === 'object') Object.assign(md, metadata);
  hostEnter();
  try {
    drain();
    send({ id: outputId, type: 'display', data: bundle, metadata: md });
  } finally { hostLeave(); }
}

function display(obj, options) {
  let bundle;
  if (options && options.raw) {
    bundle = normBundle(obj);
  } else {
    bundle = { 'text/plain': inspect(obj), ...richBundle(obj) };
  }
  emitDisplay(bundle, options && options.metadata);
}
display.html = (s) => emitDisplay({ 'text/html': String(s) });
display.markdown = (s) => emitDisplay({ 'text/markdown': String(s) });
display.svg = (s) => emitDisplay({ 'image/svg+xml': String(s) });
display.png = (b) => emitDisplay({ 'image/png': typeof b === 'string' ? b : normMime('image/png', b) });
display.jpeg = (b) => emitDisplay({ 'image/jpeg': typeof b === 'string' ? b : normMime('image/jpeg', b) });
display.json = (o) => emitDisplay({ 'application/json': normMime('application/json', o), 'text/plain': inspect(o) });
globalThis.display = display;

// ---------------------------------------------------------------------------------------------
// Cell rewrite.  Script semantics would make a top-level `let x` in one cell a SyntaxError when a
// later cell says `let x` again; a notebook wants it to rebind.  So top-level declarations become
// global `var` bindings (sync cells: `let`/`const` -> `var`, `class C` -> `var C = class C`),
// and a cell with top-level await or `import` runs as an async function whose declarations are
// hoisted as globals.  See spec/interpreter.md, "JavaScript".

let acorn;
function loadAcorn() {
  if (acorn !== undefined) return acorn;
  acorn = null;
  try {
    acorn = require('internal/deps/acorn/acorn/dist/acorn'); // with --expose-internals
    return acorn;
  } catch (e) { /* */ }
  try {
    const natives = process.binding('natives');
    const src = natives && natives['internal/deps/acorn/acorn/dist/acorn'];
    if (typeof src === 'string') {
      const mod = { exports: {} };
      vm.runInThisContext('(function (exports, module) {' + src + '\n})', { filename: 'acorn' })(mod.exports, mod);
      if (typeof mod.exports.parse === 'function') acorn = mod.exports;
    }
  } catch (e) { /* */ }
  return acorn;
}

const MAYBE_REWRITE = /\b(?:let|const|class|await|import)\b/;
const FUNCTION_TYPES = new Set(['FunctionDeclaration', 'FunctionExpression', 'ArrowFunctionExpression']);

function hasTopLevelAwait(node) {
  const stack = [node];
  while (stack.length) {
    const n = stack.pop();
    if (!n || typeof n.type !== 'string') continue;
    if (n.type === 'AwaitExpression' || (n.type === 'ForOfStatement' && n.await)) return true;
    if (FUNCTION_TYPES.has(n.type)) continue;
    for (const k of Object.keys(n)) {
      const v = n[k];
      if (Array.isArray(v)) { for (const c of v) if (c && typeof c.type === 'string') stack.push(c); }
      else if (v && typeof v.type === 'string') stack.push(v);
    }
  }
  return false;
}

function patternNames(p, out) {
  if (!p) return;
  switch (p.type) {
    case 'Identifier': out.push(p.name); break;
    case 'ObjectPattern': for (const q of p.properties) patternNames(q.type === 'RestElement' ? q.argument : q.value, out); break;
    case 'ArrayPattern': for (const q of p.elements) patternNames(q, out); break;
    case 'RestElement': patternNames(p.argument, out); break;
    case 'AssignmentPattern': patternNames(p.left, out); break;
    default: break;
  }
}

function applyEdits(code, edits) {
  edits.sort((a, b) => a.at - b.at || a.order - b.order);
  let out = '';
  let pos = 0;
  for (const e of edits) {
    out += code.slice(pos, e.at) + e.text;
    pos = e.end === undefined ? e.at : e.end;
  }
  return out + code.slice(pos);
}

function prepare(code, filename) {
  const plain = { source: code, isAsync: false, columnOffset: 0, filename };
  if (!MAYBE_REWRITE.test(code) || !loadAcorn()) return plain;
  let ast;
  try {
    ast = acorn.parse(code, {
      ecmaVersion: 'latest', sourceType: 'script', allowAwaitOutsideFunction: true,
      allowImportExportEverywhere: true, allowHashBang: true,
    });
  } catch (e) {
    return plain; // V8 reports the syntax error itself
  }
  const isAsync = ast.body.some((n) => n.type === 'ImportDeclaration') || hasTopLevelAwait(ast);
  const edits = [];
  let order = 0;
  const edit = (at, text, end) => edits.push({ at, text, end, order: order++ });
  if (!isAsync) {
    for (const n of ast.body) {
      if (n.type === 'VariableDeclaration' && n.kind !== 'var') {
        edit(n.start, 'var'.padEnd(n.kind.length), n.start + n.kind.length);
      } else if (n.type === 'ClassDeclaration' && n.id) {
        edit(n.start, `var ${n.id.name} = `);
        edit(n.end, ';');
      }
    }
    if (!edits.length) return plain;
    return { source: applyEdits(code, edits), isAsync: false, columnOffset: 0, filename };
  }
  const names = [];
  const exportsAtStart = [];
  ast.body.forEach((n, idx) => {
    if (n.type === 'VariableDeclaration') {
      const declared = [];
      for (const d of n.declarations) patternNames(d.id, declared);
      names.push(...declared);
      edit(n.start, 'void (', n.start + n.kind.length);
      for (const d of n.declarations) {
        if (!d.init && n.kind !== 'var') edit(d.id.end, ' = undefined');
      }
      const semi = code[n.end - 1] === ';';
      edit(semi ? n.end - 1 : n.end, ')');
    } else if (n.type === 'FunctionDeclaration' && n.id) {
      names.push(n.id.name);
      exportsAtStart.push(`globalThis[${stringify(n.id.name)}] = ${n.id.name};`);
    } else if (n.type === 'ClassDeclaration' && n.id) {
      names.push(n.id.name);
      edit(n.start, `${n.id.name} = `);
      edit(n.end, ';');
    } else if (n.type === 'ImportDeclaration') {
      const m = '__sandlot_module__';
      const assigns = [];
      for (const s of n.specifiers) {
        names.push(s.local.name);
        if (s.type === 'ImportDefaultSpecifier') assigns.push(`${s.local.name} = ${m}.default;`);
        else if (s.type === 'ImportNamespaceSpecifier') assigns.push(`${s.local.name} = ${m};`);
        else {
          const imported = s.imported.type === 'Identifier' ? s.imported.name : s.imported.value;
          assigns.push(`${s.local.name} = ${m}[${stringify(imported)}];`);
        }
      }
      const original = code.slice(n.start, n.end);
      const newlines = '\n'.repeat((original.match(/\n/g) || []).length);
      edit(n.start, `void ((${m}) => { ${assigns.join(' ')} })(await import(${stringify(n.source.value)}));${newlines}`, n.end);
    } else if (n.type === 'ExpressionStatement' && idx === ast.body.length - 1) {
      edit(n.expression.start, 'return (');
      edit(n.expression.end, ')');
    }
  });
  const unique = [...new Set(names)];
  const prefix = (unique.length ? `var ${unique.join(', ')}; ` : '') + '(async () => { ' + exportsAtStart.join(' ');
  return {
    source: prefix + applyEdits(code, edits) + '\n})()',
    isAsync: true,
    columnOffset: -prefix.length,
    filename,
  };
}

// ---------------------------------------------------------------------------------------------
// Cells

class Interrupt extends Error {}
let execCount = 0;
let current = null;

// Errors thrown by callbacks and rejections nobody handles would end node: report them on
// stderr (of the cell running now, or the last one) and keep the context alive.
function describe(e) {
  if (e instanceof Error) {
    const lines = userStack(e);
    if (lines.length) return lines.join('\n');
  }
  return inspect(e);
}
process.on('uncaughtException', (e) => {
  try { writeOut(1, `Uncaught ${describe(e)}\n`); } catch (err) { /* */ }
});
process.on('unhandledRejection', (reason) => {
  try { writeOut(1, `Unhandled promise rejection: ${describe(reason)}\n`); } catch (err) { /* */ }
});

function settle(promise, cell, deadline) {
  return new Promise((resolve, reject) => {
    let timer = null;
    cell.reject = reject;
    if (deadline !== null) {
      const left = Math.max(0, deadline - hrnow());
      timer = setTimeout(() => { cell.timedOut = true; reject(new Interrupt('timeout')); }, left);
      deadlineSlot[0] = Date.now() + left; // the signal worker enforces it if this thread gets stuck
    }
    Promise.resolve(promise).then(
      (v) => { if (timer) clearTimeout(timer); resolve(v); },
      (e) => { if (timer) clearTimeout(timer); reject(e); },
    );
  });
}

function userStack(e) {
  let stack;
  try { stack = String(e.stack); } catch (err) { return []; }
  const lines = stack.split('\n');
  const out = [];
  for (const line of lines) {
    if (/^\s+at /.test(line) && (line.includes('(node:vm:') || line.includes(`(${hostFile}:`)
        || line.includes(` ${hostFile}:`) || line.includes('new Script (node:vm'))) break;
    out.push(line);
  }
  // an async cell's stack ends in node's task queue: not the user's business either
  while (out.length && (out[out.length - 1] === '' || /^\s+at .*\(?node:internal\//.test(out[out.length - 1]))) out.pop();
  return out;
}

function formatError(e) {
  if (e instanceof Error || (e && typeof e === 'object' && typeof e.stack === 'string')) {
    let name = 'Error';
    let value = '';
    try { name = String(e.name || (e.constructor && e.constructor.name) || 'Error'); } catch (err) { /* */ }
    try { value = String(e.message === undefined ? '' : e.message); } catch (err) { /* */ }
    return { name, value, traceback: userStack(e) };
  }
  const text = inspect(e);
  return { name: 'Error', value: text, traceback: ['Uncaught ' + text] };
}

function formatValue(v) {
  let text = inspect(v, { colors: false });
  let truncated = false;
  if (text.length > VALUE_MAX) { text = text.slice(0, VALUE_MAX); truncated = true; }
  const rich = richBundle(v);
  const data = Object.keys(rich).length ? { 'text/plain': text, ...rich } : null;
  return { text, data, truncated };
}

function yieldOnce() {
  return new Promise((resolve) => setImmediate(resolve));
}

async function runCell(id, code, timeoutMs) {
  const seq = ++execCount;
  outputId = id;
  setOutputId(id);
  Atomics.store(shared, RUNNING, seq);
  const terminationsBefore = Atomics.load(shared, TERMINATIONS);
  const t0 = hrnow();
  const cell = { seq, reject: null, interrupted: false, timedOut: false };
  current = cell;
  let status = 'ok';
  let value = null;
  let data = null;
  let error = null;
  let truncated = false;
  try {
    const prep = prepare(code, `<cell-${seq}>`);
    const options = { filename: prep.filename, columnOffset: prep.columnOffset };
    if (DYNAMIC_IMPORT) options.importModuleDynamically = DYNAMIC_IMPORT;
    const script = new vm.Script(prep.source, options);
    const runOptions = { breakOnSigint: true };
    if (timeoutMs) runOptions.timeout = Math.max(1, Math.ceil(timeoutMs));
    let result;
    hostLeave();
    Atomics.store(shared, SYNC, seq);
    try {
      result = script.runInThisContext(runOptions);
    } finally {
      Atomics.store(shared, SYNC, 0);
      hostEnter();
    }
    hostLeave(); // user callbacks run while the cell waits
    try {
      if (prep.isAsync) result = await settle(result, cell, timeoutMs ? t0 + timeoutMs : null);
      if (result !== undefined) ({ text: value, data, truncated } = formatValue(result));
      // callbacks the cell queued (promise reactions, ticks, immediates) run within the cell
      await settle(yieldOnce(), cell, timeoutMs ? t0 + timeoutMs : null);
    } finally {
      hostEnter();
    }
  } catch (e) {
    const code2 = e && typeof e === 'object' ? e.code : undefined;
    if (cell.timedOut || code2 === 'ERR_SCRIPT_EXECUTION_TIMEOUT') {
      status = 'timeout';
      error = { name: 'TimeoutError', value: `the cell exceeded its timeout of ${timeoutMs} ms`, traceback: [] };
    } else if (cell.interrupted || code2 === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') {
      Atomics.store(shared, SIG_HANDLED, Atomics.load(shared, SIG_SEEN));
      status = 'interrupted';
      error = { name: 'Interrupted', value: 'interrupted (SIGINT)', traceback: [] };
    } else {
      status = 'error';
      error = formatError(e);
    }
  }
  if (status === 'ok' && Atomics.load(shared, TERMINATIONS) > terminationsBefore) {
    // the signal worker stopped a callback of this cell, which then ran to its end: interrupted
    Atomics.store(shared, SIG_HANDLED, Atomics.load(shared, SIG_SEEN));
    status = 'interrupted';
    value = null;
    data = null;
    error = { name: 'Interrupted', value: 'interrupted (SIGINT)', traceback: [] };
  }
  current = null;
  deadlineSlot[0] = 0;
  Atomics.store(shared, RUNNING, 0);
  const msg = {
    id, type: 'result', status, value, data, error,
    duration_ms: Math.round((hrnow() - t0) * 1000) / 1000, execution_count: seq,
  };
  if (truncated) msg.value_truncated = true;
  drain();
  send(msg);
}

function protocolError(id, text) {
  send({
    id, type: 'result', status: 'error', value: null, data: null,
    error: { name: 'ProtocolError', value: text, traceback: [] }, duration_ms: 0, execution_count: execCount,
  });
}

async function handle(line) {
  let req;
  try { req = parseJSON(line); } catch (e) { protocolError(null, `request is not JSON: ${e.message}`); return; }
  if (!req || typeof req !== 'object' || Array.isArray(req)) { protocolError(null, 'request must be a JSON object'); return; }
  const id = req.id;
  if (typeof id !== 'string' || !id || id.length > MAX_ID) {
    protocolError(null, `request id must be a non-empty string of at most ${MAX_ID} characters`);
    return;
  }
  const kind = req.kind === undefined ? 'execute' : req.kind;
  if (kind !== 'execute') { protocolError(id, `unknown kind ${stringify(kind)}`); return; }
  if (typeof req.code !== 'string') { protocolError(id, '"code" must be a string'); return; }
  const t = req.timeout_ms;
  if (t !== undefined && t !== null && (typeof t !== 'number' || !(t > 0))) {
    protocolError(id, '"timeout_ms" must be a positive number');
    return;
  }
  await runCell(id, req.code, t || 0);
}

// ---------------------------------------------------------------------------------------------
// Request loop

const queue = [];
let busy = false;
let ended = false;

function finish() {
  try { drain(); } catch (e) { /* */ }
  exit(0);
}

async function serve() {
  if (busy) return;
  busy = true;
  hostEnter();
  while (queue.length) {
    try { await handle(queue.shift()); } catch (e) { /* a host bug: keep serving */ }
  }
  hostLeave();
  busy = false;
  if (ended) finish();
}

let input;
try {
  input = new net.Socket({ fd: protoIn, readable: true, writable: false });
} catch (e) {
  input = fs.createReadStream(null, { fd: protoIn });
}
let pending = '';
input.setEncoding('utf8');
input.on('data', (chunk) => {
  hostEnter();
  try { take(chunk); } finally { hostLeave(); }
});
function take(chunk) {
  pending += chunk;
  let nl;
  while ((nl = pending.indexOf('\n')) >= 0) {
    const line = pending.slice(0, nl);
    pending = pending.slice(nl + 1);
    if (line.trim()) queue.push(line);
  }
  serve();
}
input.on('end', () => { ended = true; if (!busy) finish(); });
input.on('error', () => { ended = true; if (!busy) finish(); });

send({
  id: null, type: 'ready', language: 'javascript', version: process.versions.node, pid: process.pid,
  protocol: PROTOCOL, capture: capture ? 'fd' : 'js', interrupts: signalWorker ? 'worker' : 'sync-only',
});
hostLeave(); // idle: from now on only user callbacks run outside host code
setImmediate(() => { // the cell rewriter's parser, loaded while no request is waiting (~15 ms)
  if (busy || queue.length) return;
  hostEnter();
  try { loadAcorn(); } finally { hostLeave(); }
});
})();
