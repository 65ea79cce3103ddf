export * from "./Generations.js"
export { keyHash } from "./KeyHash.js"
