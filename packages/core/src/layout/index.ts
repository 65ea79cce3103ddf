export * from "./Generations.js"
export { keyHash } from "./KeyHash.js"
export * as Reshard from "./Reshard.js"
export * as StreamLayout from "./StreamLayout.js"
