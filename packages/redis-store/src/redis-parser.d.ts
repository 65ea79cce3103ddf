/** The RESP parser ioredis itself uses (redis-parser ships no types). */
declare module "redis-parser" {
  interface ParserOptions {
    /** Each complete top-level reply, in order. */
    readonly returnReply: (reply: unknown) => void
    /** A top-level error reply (errors inside an array are `Error` elements of it). */
    readonly returnError: (error: Error) => void
    /** The stream is not RESP: nothing after it can be trusted. */
    readonly returnFatalError?: (error: Error) => void
    /** Bulk strings as Buffers (ioredis) instead of strings (default false). */
    readonly returnBuffers?: boolean
    readonly stringNumbers?: boolean
  }
  class RedisParser {
    constructor(options: ParserOptions)
    execute(data: Buffer): void
    reset(): void
  }
  export = RedisParser
}
