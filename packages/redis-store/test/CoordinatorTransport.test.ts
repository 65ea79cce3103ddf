/** CoordinatorTransport on core's in-process transport, Redis 7.0 and Redis 8.x. */

import { CoordinatorTransport } from "@shardline/core"
import {
  coordinatorTransportContract,
  HANDOVER_MS,
  TIMEOUT_MS,
} from "./contract/CoordinatorTransport.js"
import { describeTarget, redisTargets } from "./support/targets.js"
import { redisTransportSuites } from "./support/transportSuites.js"

describeTarget(
  "CoordinatorTransport contract",
  { name: "memory (core)" },
  CoordinatorTransport.makeMemory({ timeoutMs: TIMEOUT_MS, handoverMs: HANDOVER_MS }),
  (subject) => coordinatorTransportContract(subject),
)

for (const target of redisTargets())
  if (target.kind === "redis7" || target.kind === "redis8") redisTransportSuites(target)
