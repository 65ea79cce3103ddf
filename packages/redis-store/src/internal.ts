/**
 * `@shardline/redis-store/internal`: what Shardline's own operator tools
 * (@shardline/tools: the `shardline` CLI, the dashboard, dead-letter and
 * group administration, migrate-keys) need from the storage adapter beyond
 * its public API: the registered Lua scripts and their reply codes, and the
 * long-running commands' stop signal (docs/development.md, "Packages").
 *
 * Not public API: it changes with the adapter, in any release. Applications
 * use the package's root export.
 */
export { Code, evalScript, type Reply } from "./internal/reply.js"
export { untilStopped } from "./internal/untilStopped.js"
export { type Script, Scripts } from "./scripts.js"
