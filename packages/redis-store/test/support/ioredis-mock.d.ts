/** ioredis-mock ships no types: it is an in-memory ioredis Redis. */
declare module "ioredis-mock" {
  import type { Redis } from "ioredis"

  const RedisMock: new () => Redis
  export default RedisMock
}
