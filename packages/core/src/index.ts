export * from "./assignor/stickyAssign.js"
export * from "./protocol/Heartbeat.js"
