import { defineConfig } from "tsup"

export default defineConfig({
  entry: [
    "src/index.ts",
    "src/coordinator.ts",
    "src/simulator.ts",
    "src/heartbeatRoundTrip.ts",
    "src/runtime.ts",
    "src/runtimeRedis.ts",
    "src/assignorWalkthrough.ts",
    "src/reshard.ts",
    "src/simulatorReshard.ts",
    "src/telemetry.ts",
    "src/idleRedis.ts",
    "src/failover.ts",
    "src/failoverMember.ts",
    "src/transactionsRedis.ts",
    "src/durabilityRedis.ts",
    "src/commitScript.ts",
  ],
  format: ["esm"],
  dts: true,
  sourcemap: true,
  clean: true,
  target: "node20",
})
