export * from "./assignor/movementLowerBound.js"
export * from "./assignor/stickyAssign.js"
export * from "./Errors.js"
export * from "./protocol/Heartbeat.js"
