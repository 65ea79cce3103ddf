/**
 * Starts every test server once per run, in parallel, and hands their
 * addresses to the test files (`inject`). A server that cannot start is
 * handed over as its one-line reason, and the suites on it fail with it.
 */
import type { TestProject } from "vitest/node"
import { type ClusterInfo, type ServerInfo, startTestServers } from "../src/testing.js"

declare module "vitest" {
  export interface ProvidedContext {
    redis7: ServerInfo
    redis8: ServerInfo
    valkey8: ServerInfo
    cluster7: ClusterInfo
  }
}

export default async function setup(project: TestProject) {
  const servers = await startTestServers({
    kinds: ["redis7", "redis8", "valkey8"],
    cluster: "redis7",
  })
  project.provide("redis7", servers.infos.redis7!)
  project.provide("redis8", servers.infos.redis8!)
  project.provide("valkey8", servers.infos.valkey8!)
  project.provide("cluster7", servers.cluster!)
  return servers.stop
}
