/**
 * Starts every test server once per run, in parallel, and hands their
 * addresses to the test files (`inject`). A server that cannot start is
 * handed over as its one-line reason, and the suites on it fail with it.
 */
import type { TestProject } from "vitest/node"
import {
  type ClusterInfo,
  type ServerInfo,
  startClusterForTests,
  startForTests,
} from "../src/testing.js"

declare module "vitest" {
  export interface ProvidedContext {
    redis7: ServerInfo
    redis8: ServerInfo
    valkey8: ServerInfo
    cluster7: ClusterInfo
  }
}

export default async function setup(project: TestProject) {
  const [redis7, redis8, valkey8, cluster7] = await Promise.all([
    startForTests("redis7"),
    startForTests("redis8"),
    startForTests("valkey8"),
    startClusterForTests("redis7"),
  ])
  project.provide("redis7", redis7.info)
  project.provide("redis8", redis8.info)
  project.provide("valkey8", valkey8.info)
  project.provide("cluster7", cluster7.info)
  return async () => {
    await Promise.all([redis7, redis8, valkey8, cluster7].map((s) => s.stop()))
  }
}
