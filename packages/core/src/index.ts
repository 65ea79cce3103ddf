export * from "./assignor/stickyAssign.js"
