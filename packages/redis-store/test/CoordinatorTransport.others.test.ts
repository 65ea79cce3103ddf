/** CoordinatorTransport on Valkey 8 and the 3-node cluster (a file of its own: runs in parallel). */
import { redisTargets } from "./support/targets.js"
import { redisTransportSuites } from "./support/transportSuites.js"

for (const target of redisTargets())
  if (target.kind === "valkey8" || target.kind === "cluster7") redisTransportSuites(target)
