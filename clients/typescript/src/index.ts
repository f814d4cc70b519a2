/**
 * sandlot: a TypeScript client for sandlotd's HTTP API.
 *
 *   import { Sandlot } from "sandlot";
 *   const client = new Sandlot();                 // $SANDLOT_SOCKET or /run/sandlot/sandlot.sock
 *   const sb = await client.create({ memory: "1G", ttl_seconds: 3600 });
 *   const r = await sb.exec("python3 -c 'print(6*7)'");
 *   await sb.delete();
 *
 * Framework adapters live in "sandlot/ai-sdk", "sandlot/deepagents" and
 * "sandlot/langchain".
 */
export { Sandlot, Sandbox, Exec } from "./client.js";
export type { SandlotOptions, ListOptions, SignalOption, MaxBytesOption, ChangesOptions, Command } from "./client.js";
export type { ConnectionOptions, Body } from "./http.js";
export { SandlotError, isSandlotError, isMissingPath } from "./errors.js";
export type * from "./types.js";
