/**
 * A dedicated connection's socket, taken over from ioredis once it is ready
 * (connected, authenticated, its database selected, TLS and every other
 * ioredis option applied), then spoken to directly: a burst of commands is
 * encoded into ONE string and written with one `write`, and the replies are
 * parsed as strings by the RESP parser ioredis uses (`redis-parser`) and
 * matched to their burst in order.
 *
 * Why: through ioredis, a gated read (MULTI, gate, XACK, XREADGROUP,
 * RENAMENX, EXEC) is six `Command`s, six promises and a corked write of six
 * chunks, and every reply is parsed into Buffers, then copied into strings.
 * Over the wire it is one string and one promise, and each bulk string is
 * decoded once: a gated read costs Node about as much as raw ioredis
 * XREADGROUP + XACK (docs/redis.md, "The gated fence").
 *
 * What keeps it safe (the gated fence relies on it): a burst is one write,
 * so bursts of concurrent read loops never interleave; the wire never
 * reconnects and never resends. A closed or broken socket fails every burst
 * in flight and every later one; the caller takes a new connection.
 */

import type { Redis } from "ioredis"
import RedisParser from "redis-parser"
import type { Command } from "./burst.js"

export interface Wire {
  /**
   * Writes `commands` in one write; resolves with their replies in order (an
   * error reply is an `Error` element, as are errors inside an EXEC array).
   * Rejects when the connection closes or breaks first.
   */
  readonly send: (commands: ReadonlyArray<Command>) => Promise<Array<unknown>>
  /** Closed (by `close`, the server or an error): every `send` fails. */
  readonly closed: () => boolean
  readonly close: () => void
}

interface Waiting {
  left: number
  readonly replies: Array<unknown>
  readonly resolve: (replies: Array<unknown>) => void
  readonly reject: (error: Error) => void
}

/** One command in RESP: an array of bulk strings. */
const encode = (command: Command): string => {
  let out = `*${command.length}\r\n`
  for (const arg of command) {
    const text = typeof arg === "string" ? arg : String(arg)
    out += `$${Buffer.byteLength(text)}\r\n${text}\r\n`
  }
  return out
}

/**
 * Takes over `client`'s socket. `client` must be ready, have no command in
 * flight, and be used for nothing else afterwards (ioredis no longer sees its
 * replies); close the wire to close it.
 */
export const adopt = (client: Redis): Wire => {
  if (client.status !== "ready") throw new Error(`wire: the connection is ${client.status}`)
  const socket = client.stream
  const queue: Array<Waiting> = []
  let failure: Error | undefined

  const fail = (error: Error) => {
    if (failure !== undefined) return
    failure = error
    for (const w of queue.splice(0)) w.reject(error)
    socket.destroy()
  }
  const settle = (reply: unknown) => {
    const w = queue[0]
    // a reply nobody asked for: the stream is out of step, trust nothing after it
    if (w === undefined) return fail(new Error("wire: a reply without a command"))
    w.replies.push(reply)
    if (--w.left === 0) {
      queue.shift()
      w.resolve(w.replies)
    }
  }
  const parser = new RedisParser({
    returnReply: settle,
    returnError: settle,
    returnFatalError: (error) => fail(error),
  })
  // ioredis' parser no longer reads this socket: its replies are ours now
  socket.removeAllListeners("data")
  socket.on("data", (data: Buffer) => parser.execute(data))
  socket.on("error", (error: Error) => fail(error))
  socket.on("close", () => fail(new Error("wire: the connection closed")))

  return {
    send: (commands) =>
      new Promise((resolve, reject) => {
        if (failure !== undefined) return reject(failure)
        if (commands.length === 0) return resolve([])
        queue.push({ left: commands.length, replies: [], resolve, reject })
        let text = ""
        for (const command of commands) text += encode(command)
        socket.write(text)
      }),
    closed: () => failure !== undefined,
    close: () => fail(new Error("wire: closed")),
  }
}
