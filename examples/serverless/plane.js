// A nymph control plane as a serverless handler, on Node's http module.
//
// Every request is handled the way a Worker or a Lambda function would:
// load the state from the store, call the plane core (Go, compiled to
// WebAssembly) once, store the new state, answer. Nothing is kept between
// requests but the store. A poll that finds nothing is asked again every
// POLL_RETRY_MS until LONG_POLL_MS passed: long-polls are answered short.
//
// The core is ./planewasm (js/wasm, on Go's wasm_exec.js), or with
// --wasi ./planewasi (a wasip1 reactor, on node:wasi).
//
//   PLANE_WASM   the module (default: planewasm.wasm, or planewasi.wasm, here)
//   WASM_EXEC    Go's lib/wasm/wasm_exec.js (default: from `go env GOROOT`)
//   STATE_FILE   a JSON file to keep the state in (default: in memory)
//   DAEMON_TOKEN, ADMIN_TOKEN   the bearer tokens of daemons and operators
//   LISTEN       host:port (default 127.0.0.1:8384; port 0 picks one)
"use strict";

const fs = require("fs");
const http = require("http");
const path = require("path");
const { execFileSync } = require("child_process");

const LONG_POLL_MS = 1000;
const POLL_RETRY_MS = 100;

// The store: a JSON file written whole (through a rename), or memory.
function openStore(file) {
  if (!file) {
    let state = "";
    return { load: () => state, save: (s) => { state = s; } };
  }
  return {
    load: () => (fs.existsSync(file) ? fs.readFileSync(file, "utf8") : ""),
    save: (s) => {
      fs.writeFileSync(file + ".tmp", s);
      fs.renameSync(file + ".tmp", file);
    },
  };
}

// The js/wasm core: main exports nymphPlaneHandle, then waits for calls.
async function loadJS(wasm) {
  const goroot = () => execFileSync("go", ["env", "GOROOT"], { encoding: "utf8" }).trim();
  require(process.env.WASM_EXEC || path.join(goroot(), "lib", "wasm", "wasm_exec.js"));
  const go = new globalThis.Go();
  const { instance } = await WebAssembly.instantiate(wasm, go.importObject);
  go.run(instance);
  return globalThis.nymphPlaneHandle;
}

// The wasip1 core, behind the same function as nymphPlaneHandle: the
// request goes in as one JSON envelope written to a buffer of Go's, the
// reply comes back as one (planewasi's package doc has the ABI).
async function loadWASI(wasm) {
  // node:wasi is experimental in Node 20 and warns so at every start;
  // other warnings are still printed.
  process.removeAllListeners("warning");
  process.on("warning", (w) => {
    if (w.name !== "ExperimentalWarning" || !w.message.startsWith("WASI")) console.warn(`${w.name}: ${w.message}`);
  });
  const { WASI } = require("node:wasi");
  const wasi = new WASI({ version: "preview1" }); // no files, args or environment: the core needs none
  const { instance } = await WebAssembly.instantiate(wasm, wasi.getImportObject());
  wasi.initialize(instance); // a reactor: _initialize, then the exports
  const { memory, nymph_alloc, nymph_handle } = instance.exports;
  return (state, nowMs, method, path, headers, body, tokens) => {
    const req = Buffer.from(JSON.stringify({ state, nowMs, method, path,
      authorization: headers.authorization || "", body: Buffer.from(body).toString("base64"), tokens }));
    const ptr = nymph_alloc(req.length);
    new Uint8Array(memory.buffer, ptr, req.length).set(req); // views are made after the calls: a call may grow memory
    const r = nymph_handle(ptr, req.length); // a BigInt, ptr<<32 | len
    const out = JSON.parse(Buffer.from(memory.buffer, Number(r >> 32n), Number(r & 0xffffffffn)).toString());
    if (!out.error) out.body = Buffer.from(out.body || "", "base64");
    return out;
  };
}

// One step of the plane: restore, decide, store. Synchronous, so two
// requests never interleave between the load and the save.
function step(plane, store, tokens, req, body) {
  const before = store.load();
  const out = plane(before, Date.now(), req.method, req.url.split("?")[0], req.headers, body, tokens);
  if (out.error) throw new Error(out.error);
  if (out.state !== before) store.save(out.state); // durable before the answer
  return out;
}

async function handle(plane, store, tokens, req, res) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const body = new Uint8Array(Buffer.concat(chunks));
  let gone = false;
  res.on("close", () => { gone = true; });
  const until = Date.now() + LONG_POLL_MS;
  let out = step(plane, store, tokens, req, body);
  while (out.parked && !gone && Date.now() + POLL_RETRY_MS < until) {
    await new Promise((r) => setTimeout(r, POLL_RETRY_MS));
    if (!gone) out = step(plane, store, tokens, req, body); // a daemon that left takes nothing
  }
  const headers = { "Content-Type": out.contentType, "Content-Length": out.body.length };
  if (out.retryAfterS > 0) headers["Retry-After"] = String(out.retryAfterS); // a refusal that says when
  res.writeHead(out.status, headers);
  res.end(out.body);
}

async function main() {
  const wasi = process.argv.includes("--wasi");
  const file = process.env.PLANE_WASM || path.join(__dirname, wasi ? "planewasi.wasm" : "planewasm.wasm");
  const wasm = fs.readFileSync(file);
  const plane = await (wasi ? loadWASI(wasm) : loadJS(wasm));

  const store = openStore(process.env.STATE_FILE);
  const tokens = { daemon: process.env.DAEMON_TOKEN || "", admin: process.env.ADMIN_TOKEN || "" };
  const server = http.createServer((req, res) => {
    handle(plane, store, tokens, req, res).catch((err) => {
      console.error(err);
      if (!res.headersSent) res.writeHead(500, { "Content-Type": "text/plain" });
      res.end(String(err) + "\n");
    });
  });
  const [host, port] = (process.env.LISTEN || "127.0.0.1:8384").split(":");
  server.listen(Number(port), host, () => {
    const a = server.address();
    console.log(`nymph plane.js: listening on http://${a.address}:${a.port}`);
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
