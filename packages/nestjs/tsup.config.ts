import { defineConfig } from "tsup"

export default defineConfig({
  entry: { index: "src/index.ts", terminus: "src/terminus.ts" },
  format: ["esm"],
  dts: true,
  sourcemap: true,
  clean: true,
  target: "node20",
  // NestJS and the runtime are the app's own (peer dependencies): one copy of
  // each, so @StreamListener's registrations and Nest's container are shared
  external: [/^@nestjs\//, /^@shardline\//, "reflect-metadata", "rxjs"],
})
