// Perfetto's trace processor (the WebAssembly build the Perfetto UI ships) hosted by Node, answering
// on 127.0.0.1 the HTTP endpoints of `trace_processor_shell --httpd` that Perfetto's Python client
// uses, so that `perfetto.trace_processor.TraceProcessor(addr=...)` talks to it unchanged.
//
// Usage: node tp_host.mjs --wasm trace_processor.wasm [--port 0]
//
// Once the module is ready the host prints one JSON line on stdout, {"port": N, "version": "..."},
// and serves until its stdin closes (so it never outlives the process that started it).
//
// Endpoints (request and response bodies are the protobuf messages of trace_processor.proto):
//   GET  /status                      -> StatusResult
//   POST /parse          trace bytes  -> AppendTraceDataResult
//   GET  /notify_eof                  -> FinalizeDataResult (the shell sends an empty body; the
//                                        Python client ignores it, ktrace reads the import error)
//   POST /query          QueryArgs    -> QueryResult (all batches)
//   GET  /restore_initial_tables      -> empty
//   POST /compute_metric ComputeMetricArgs -> ComputeMetricResult
//   POST /trace_summary  TraceSummaryArgs  -> TraceSummaryResult
//   POST /reset          ResetTraceProcessorArgs -> empty (drops the loaded trace)
//
// The wasm module exports trace_processor_rpc_init(callback, request_buffer_size) and
// trace_processor_on_rpc_request(size). Requests are TraceProcessorRpc messages framed as the
// repeated field 1 of TraceProcessorRpcStream; replies come back through the callback, framed the
// same way and possibly split into several calls. The module needs a few Emscripten runtime
// imports, provided below: clocks, stdio to stderr, heap growth; file system calls fail with ENOSYS
// (the trace processor reads its input from the RPC, not from files).

import fs from 'node:fs';
import http from 'node:http';
import process from 'node:process';

const REQ_BUF_SIZE = 16 * 1024 * 1024;
const WASM_PAGE = 65536;
const ENOSYS = 52; // Emscripten's errno numbering
const ESPIPE = 70;

// TraceProcessorRpc.TraceProcessorMethod values and the field number of each one's argument and
// result (trace_processor.proto).
const TPM = {
  APPEND_TRACE_DATA: 1,
  FINALIZE_TRACE_DATA: 2,
  QUERY_STREAMING: 3,
  COMPUTE_METRIC: 5,
  RESTORE_INITIAL_TABLES: 7,
  GET_STATUS: 10,
  RESET_TRACE_PROCESSOR: 11,
  SUMMARIZE_TRACE: 15,
};

function parseArgs(argv) {
  const out = {port: 0, wasm: null};
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--wasm') out.wasm = argv[++i];
    else if (argv[i] === '--port') out.port = Number(argv[++i]);
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  if (!out.wasm) throw new Error('--wasm PATH is required');
  return out;
}

// ---- protobuf wire format: just what the envelope needs -------------------------------------

function varint(n) {
  // n < 2**53 (lengths, field keys, small enums): no BigInt needed.
  const bytes = [];
  while (n >= 0x80) {
    bytes.push((n % 0x80) | 0x80);
    n = Math.floor(n / 0x80);
  }
  bytes.push(n);
  return Buffer.from(bytes);
}

function readVarint(buf, pos) {
  let value = 0;
  let scale = 1;
  for (;;) {
    if (pos >= buf.length) return null;
    const b = buf[pos++];
    value += (b & 0x7f) * scale;
    if (!(b & 0x80)) return [value, pos];
    scale *= 0x80;
  }
}

function lengthField(field, payload) {
  return Buffer.concat([varint(field * 8 + 2), varint(payload.length), payload]);
}

function varintField(field, n) {
  return Buffer.concat([varint(field * 8), varint(n)]);
}

// Splits a message into {field: [values]}: numbers for varints, Buffers for length-delimited.
function decodeFields(buf) {
  const fields = new Map();
  let pos = 0;
  while (pos < buf.length) {
    const [key, p1] = readVarint(buf, pos);
    const field = Math.floor(key / 8);
    const wire = key & 7;
    let value;
    if (wire === 0) {
      [value, pos] = readVarint(buf, p1);
    } else if (wire === 2) {
      const [len, p2] = readVarint(buf, p1);
      value = buf.subarray(p2, p2 + len);
      pos = p2 + len;
    } else if (wire === 1) {
      value = buf.subarray(p1, p1 + 8);
      pos = p1 + 8;
    } else if (wire === 5) {
      value = buf.subarray(p1, p1 + 4);
      pos = p1 + 4;
    } else {
      throw new Error(`unexpected wire type ${wire} in an RPC reply`);
    }
    if (!fields.has(field)) fields.set(field, []);
    fields.get(field).push(value);
  }
  return fields;
}

// ---- the Emscripten runtime the module imports ----------------------------------------------

class Runtime {
  constructor() {
    this.instance = null;
    this.stderrLine = '';
    this.lastStderr = [];
  }

  get memory() {
    return this.instance.exports.memory;
  }

  u8() {
    // A fresh view each time: growing the memory detaches earlier ones.
    return new Uint8Array(this.memory.buffer);
  }

  dv() {
    return new DataView(this.memory.buffer);
  }

  cString(ptr) {
    const heap = this.u8();
    let end = ptr;
    while (heap[end]) end++;
    return Buffer.from(heap.subarray(ptr, end)).toString('utf8');
  }

  logErr(text) {
    for (const ch of text.split(/(\n)/)) {
      if (ch === '\n') {
        this.lastStderr.push(this.stderrLine);
        if (this.lastStderr.length > 200) this.lastStderr.shift();
        process.stderr.write(`tp: ${this.stderrLine}\n`);
        this.stderrLine = '';
      } else {
        this.stderrLine += ch;
      }
    }
  }

  writeTm(tmPtr, date, utc) {
    const dv = this.dv();
    const get = (name) => (utc ? date[`getUTC${name}`]() : date[`get${name}`]());
    const year = get('FullYear');
    const start = utc ? Date.UTC(year, 0, 1) : new Date(year, 0, 1).getTime();
    const fields = [
      get('Seconds'), get('Minutes'), get('Hours'), get('Date'), get('Month'), year - 1900, get('Day'),
      Math.floor((date.getTime() - start) / 86400000), 0,
    ];
    fields.forEach((v, i) => dv.setInt32(tmPtr + 4 * i, v, true));
    dv.setInt32(tmPtr + 36, utc ? 0 : -date.getTimezoneOffset() * 60, true); // tm_gmtoff
    dv.setUint32(tmPtr + 40, 0, true); // tm_zone: no name
  }

  imports() {
    const rt = this;
    const nosys = () => -ENOSYS;
    const env = {
      emscripten_get_now: () => performance.now(),
      emscripten_date_now: () => Date.now(),
      emscripten_get_heap_max: () => 4 * 1024 * 1024 * 1024 - WASM_PAGE,
      emscripten_resize_heap(requested) {
        const want = requested >>> 0;
        const have = rt.memory.buffer.byteLength;
        // Grow by at least a fifth so that a stream of small requests does not grow page by page.
        const target = Math.min(Math.max(want, have + Math.floor(have / 5)), 4 * 1024 * 1024 * 1024 - WASM_PAGE);
        for (const size of [target, want]) {
          try {
            rt.memory.grow(Math.ceil((size - have) / WASM_PAGE));
            return 1;
          } catch (e) {
            // try the exact size next
          }
        }
        return 0;
      },
      emscripten_err: (ptr) => rt.logErr(rt.cString(ptr).replace(/\n$/, '') + '\n'),
      __assert_fail(cond, file, line, fn) {
        throw new Error(`assertion failed: ${rt.cString(cond)} at ${rt.cString(file)}:${line} ${rt.cString(fn)}`);
      },
      _abort_js() {
        throw new Error(`trace processor aborted: ${rt.lastStderr.slice(-5).join(' | ')}`);
      },
      _tzset_js(timezone, daylight, stdName, dstName) {
        // The host runs in UTC as far as the module is concerned: timestamps are ns since boot.
        const dv = rt.dv();
        dv.setInt32(timezone, 0, true);
        dv.setInt32(daylight, 0, true);
        const heap = rt.u8();
        heap.set([0x55, 0x54, 0x43, 0], stdName); // "UTC"
        heap.set([0x55, 0x54, 0x43, 0], dstName);
      },
      _gmtime_js: (t, tmPtr) => rt.writeTm(tmPtr, new Date(Number(t) * 1000), true),
      _localtime_js: (t, tmPtr) => rt.writeTm(tmPtr, new Date(Number(t) * 1000), true),
      _timegm_js(tmPtr) {
        const dv = rt.dv();
        const f = (i) => dv.getInt32(tmPtr + 4 * i, true);
        return BigInt(Math.floor(Date.UTC(f(5) + 1900, f(4), f(3), f(2), f(1), f(0)) / 1000));
      },
      _mmap_js: nosys,
      _munmap_js: nosys,
      __syscall_fcntl64: nosys,
      __syscall_ioctl: nosys,
      __syscall_faccessat: nosys,
      __syscall_fchmod: nosys,
      __syscall_chmod: nosys,
      __syscall_fchown32: nosys,
      __syscall_openat: nosys,
      __syscall_fstat64: nosys,
      __syscall_stat64: nosys,
      __syscall_newfstatat: nosys,
      __syscall_lstat64: nosys,
      __syscall_ftruncate64: nosys,
      __syscall_getcwd: nosys,
      __syscall_mkdirat: nosys,
      __syscall_readlinkat: nosys,
      __syscall_rmdir: nosys,
      __syscall_unlinkat: nosys,
      __syscall_utimensat: nosys,
    };
    const wasi = {
      fd_write(fd, iov, iovcnt, pnum) {
        const dv = rt.dv();
        const heap = rt.u8();
        let n = 0;
        let text = '';
        for (let i = 0; i < iovcnt; i++) {
          const ptr = dv.getUint32(iov + 8 * i, true);
          const len = dv.getUint32(iov + 8 * i + 4, true);
          text += Buffer.from(heap.subarray(ptr, ptr + len)).toString('utf8');
          n += len;
        }
        if (fd === 1 || fd === 2) rt.logErr(text); // stdout is the host's protocol channel
        dv.setUint32(pnum, n, true);
        return 0;
      },
      fd_read: () => ENOSYS,
      fd_close: () => 0,
      fd_sync: () => 0,
      fd_seek: () => ESPIPE,
      fd_fdstat_get(fd, ptr) {
        if (fd > 2) return 8; // EBADF
        const dv = rt.dv();
        for (let i = 0; i < 24; i += 4) dv.setUint32(ptr + i, 0, true);
        dv.setUint8(ptr, 2); // a character device
        return 0;
      },
      clock_time_get(clock, precision, ptime) {
        const ns = clock === 0 ? BigInt(Date.now()) * 1000000n : process.hrtime.bigint();
        rt.dv().setBigUint64(ptime, ns, true);
        return 0;
      },
      environ_sizes_get(pcount, psize) {
        const dv = rt.dv();
        dv.setUint32(pcount, 0, true);
        dv.setUint32(psize, 0, true);
        return 0;
      },
      environ_get: () => 0,
    };
    return {env, wasi_snapshot_preview1: wasi};
  }
}

// A function of type (i32, i32) -> () that calls `fn`, usable in the module's function table. Node
// 20 cannot make one from JavaScript directly (no WebAssembly.Function), so a tiny module imports
// `fn` and re-exports it as a wasm function.
function wasmCallback(fn) {
  const bytes = new Uint8Array([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
    0x01, 0x06, 0x01, 0x60, 0x02, 0x7f, 0x7f, 0x00, // type section: (i32, i32) -> ()
    0x02, 0x07, 0x01, 0x01, 0x65, 0x01, 0x66, 0x00, 0x00, // import "e" "f" of type 0
    0x07, 0x05, 0x01, 0x01, 0x66, 0x00, 0x00, // export "f" = function 0
  ]);
  const mod = new WebAssembly.Module(bytes);
  return new WebAssembly.Instance(mod, {e: {f: fn}}).exports.f;
}

// ---- the RPC channel ------------------------------------------------------------------------

class TraceProcessorWasm {
  constructor(wasmPath) {
    this.rt = new Runtime();
    const module = new WebAssembly.Module(fs.readFileSync(wasmPath));
    this.rt.instance = new WebAssembly.Instance(module, this.rt.imports());
    const ex = this.rt.instance.exports;
    ex.emscripten_stack_init();
    ex.__wasm_call_ctors();
    this.rx = [];
    const table = ex.__indirect_function_table;
    const slot = table.grow(1);
    table.set(slot, wasmCallback((ptr, size) => {
      const start = ptr >>> 0;
      this.rx.push(Buffer.from(this.rt.u8().slice(start, start + size)));
    }));
    this.reqBuf = ex.trace_processor_rpc_init(slot, REQ_BUF_SIZE) >>> 0;
    this.seq = 0;
    this.dead = null; // set once the module has aborted: its state is then undefined
  }

  // Sends one request; returns the replies as [{method, fields}] (fields of TraceProcessorRpc).
  call(method, argField, argBytes) {
    if (this.dead) throw new Error(`the trace processor aborted earlier: ${this.dead}`);
    this.seq += 1;
    const parts = [varintField(1, this.seq), varintField(2, method)];
    if (argField) parts.push(lengthField(argField, argBytes));
    const frame = lengthField(1, Buffer.concat(parts));
    this.rx = [];
    const ex = this.rt.instance.exports;
    try {
      for (let off = 0; off < frame.length; off += REQ_BUF_SIZE) {
        const piece = frame.subarray(off, Math.min(off + REQ_BUF_SIZE, frame.length));
        this.rt.u8().set(piece, this.reqBuf);
        ex.trace_processor_on_rpc_request(piece.length);
      }
    } catch (e) {
      this.dead = String(e && e.message ? e.message : e);
      throw e;
    }
    const replies = [];
    const data = Buffer.concat(this.rx);
    this.rx = [];
    let pos = 0;
    while (pos < data.length) {
      const [key, p1] = readVarint(data, pos);
      const [len, p2] = readVarint(data, p1);
      if (key !== 0x0a) throw new Error(`RPC framing error (key ${key})`);
      const fields = decodeFields(data.subarray(p2, p2 + len));
      pos = p2 + len;
      if (fields.has(5)) throw new Error(`trace processor: ${fields.get(5)[0].toString()}`);
      replies.push(fields);
    }
    return replies;
  }

  // The bytes of result field `resultField` over all replies (a streamed query's batches joined:
  // concatenated protobuf messages merge into one).
  result(method, argField, argBytes, resultField) {
    const out = [];
    for (const fields of this.call(method, argField, argBytes)) {
      if (fields.has(4)) throw new Error(`request ${method} unknown to this trace processor`);
      for (const v of fields.get(resultField) || []) out.push(v);
    }
    return Buffer.concat(out);
  }
}

// ---- HTTP ------------------------------------------------------------------------------------

function route(tp, method, url, body) {
  switch (`${method} ${url}`) {
    case 'GET /status':
    case 'POST /status':
      return tp.result(TPM.GET_STATUS, 0, null, 210);
    case 'POST /parse':
      return tp.result(TPM.APPEND_TRACE_DATA, 101, body, 201);
    case 'GET /notify_eof':
    case 'POST /notify_eof':
      return tp.result(TPM.FINALIZE_TRACE_DATA, 0, null, 212);
    case 'POST /query':
      return tp.result(TPM.QUERY_STREAMING, 103, body, 203);
    case 'GET /restore_initial_tables':
    case 'POST /restore_initial_tables':
      return tp.result(TPM.RESTORE_INITIAL_TABLES, 0, null, 0);
    case 'POST /compute_metric':
      return tp.result(TPM.COMPUTE_METRIC, 105, body, 205);
    case 'POST /trace_summary':
      return tp.result(TPM.SUMMARIZE_TRACE, 110, body, 214);
    case 'POST /reset':
      return tp.result(TPM.RESET_TRACE_PROCESSOR, 107, body, 0);
    default:
      return null;
  }
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const tp = new TraceProcessorWasm(args.wasm);
  const status = decodeFields(tp.result(TPM.GET_STATUS, 0, null, 210));
  const version = (status.get(2) || [Buffer.from('unknown')])[0].toString();

  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let reply;
      try {
        reply = route(tp, req.method, req.url.split('?')[0], Buffer.concat(chunks));
      } catch (e) {
        res.writeHead(500, {'Content-Type': 'text/plain'});
        res.end(String(e && e.stack ? e.stack : e));
        return;
      }
      if (reply === null) {
        res.writeHead(404, {'Content-Type': 'text/plain'});
        res.end('not found');
        return;
      }
      res.writeHead(200, {'Content-Type': 'application/x-protobuf', 'Cache-Control': 'no-cache',
                          'Content-Length': reply.length});
      res.end(reply);
    });
  });
  server.keepAliveTimeout = 0; // the Python client holds one connection for the whole session
  server.listen(args.port, '127.0.0.1', () => {
    process.stdout.write(JSON.stringify({port: server.address().port, version}) + '\n');
  });
  process.stdin.on('end', () => process.exit(0));
  process.stdin.on('error', () => process.exit(0));
  process.stdin.resume();
}

main();
