export * from "./assignor/stickyAssign.js"
export * from "./Errors.js"
export * as MemberMachine from "./member/MemberMachine.js"
export * from "./protocol/Heartbeat.js"
