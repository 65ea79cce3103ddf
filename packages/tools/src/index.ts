/**
 * `@shardline/tools`: Shardline's operator tools, apart from the storage
 * adapter they run on (docs/development.md, "Packages"): the code of the
 * `shardline` CLI (`./cli`; the bin is @shardline/member-runtime's), the
 * dashboard, inspect, dead-letter and group administration, migrate-keys.
 *
 * @example
 * import { Admin } from "@shardline/tools"
 * const letters = yield* Admin.listDeadLetters({ stream: "orders", group: "billing" })
 */
export * as Admin from "./Admin.js"
export * as Dashboard from "./dashboard/server.js"
export * as Inspect from "./inspect.js"
export * as MigrateKeys from "./MigrateKeys.js"
