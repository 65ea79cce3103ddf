/**
 * The tests' TCP proxy (`startProxy`, src/testProxy.ts): what it forwards
 * arrives whole and in order, never earlier than the delay asked for, also
 * when the delay drops while chunks wait; it loses one reply or holds a
 * link when asked. The target is an echo server (each chunk back as it
 * came), so the test sees both directions. Only lower bounds on time: a
 * slow machine cannot make them fail.
 */
import net from "node:net"
import { afterEach, describe, expect, it } from "vitest"
import { startProxy, type TcpProxy } from "../src/testing.js"

const echoServer = () =>
  new Promise<{ port: number; close: () => void }>((resolve) => {
    const sockets = new Set<net.Socket>()
    const server = net.createServer((s) => {
      sockets.add(s)
      s.on("data", (d) => s.write(d))
      s.on("error", () => {})
    })
    server.listen(0, "127.0.0.1", () =>
      resolve({
        port: (server.address() as net.AddressInfo).port,
        close: () => {
          for (const s of sockets) s.destroy()
          server.close()
        },
      }),
    )
  })

/** A client of the proxy that records what comes back, with when. */
const clientOf = (proxy: TcpProxy) =>
  new Promise<{
    socket: net.Socket
    received: () => string
    arrivals: Array<{ at: number; text: string }>
    closed: Promise<void>
  }>((resolve) => {
    const arrivals: Array<{ at: number; text: string }> = []
    const socket = net.connect(proxy.port, proxy.host, () =>
      resolve({
        socket,
        received: () => arrivals.map((a) => a.text).join(""),
        arrivals,
        closed,
      }),
    )
    const closed = new Promise<void>((done) => socket.on("close", () => done()))
    socket.setNoDelay(true)
    socket.setEncoding("utf8")
    socket.on("data", (text: string) => arrivals.push({ at: performance.now(), text }))
    socket.on("error", () => {})
  })

const until = async (what: string, done: () => boolean) => {
  const deadline = performance.now() + 10_000
  while (!done()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe("the tests' TCP proxy", () => {
  const cleanups: Array<() => unknown> = []
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c()
  })
  const setup = async (options: Parameters<typeof startProxy>[1] = {}) => {
    const echo = await echoServer()
    cleanups.push(echo.close)
    const proxy = await startProxy({ host: "127.0.0.1", port: echo.port }, options)
    cleanups.push(proxy.close)
    const client = await clientOf(proxy)
    cleanups.push(() => client.socket.destroy())
    return { proxy, client }
  }

  it("without a delay, forwards both ways at once, in order", async () => {
    const { proxy, client } = await setup()
    const sent = Array.from({ length: 200 }, (_, i) => `<${i}>`)
    for (const s of sent) client.socket.write(s)
    await until("every chunk echoed", () => client.received().length === sent.join("").length)
    expect(client.received()).toBe(sent.join(""))
    expect(proxy.connections()).toBe(1)
  })

  it("with a delay each way, a round trip takes at least both delays, and order holds", async () => {
    const { client } = await setup({ delayMs: { toTarget: 120, toClient: 80 } })
    const sent = Array.from({ length: 50 }, (_, i) => `<${i}>`)
    const at = performance.now()
    for (const s of sent) {
      client.socket.write(s)
      await sleep(1)
    }
    await until("every chunk echoed", () => client.received().length === sent.join("").length)
    expect(client.received()).toBe(sent.join(""))
    // the first byte back came no sooner than 120 ms there and 80 ms back
    expect(client.arrivals[0]!.at - at).toBeGreaterThanOrEqual(200 - 1)
  })

  it("a delay lowered while chunks wait: the later chunks never overtake the waiting ones", async () => {
    const { proxy, client } = await setup({ delayMs: 300 })
    client.socket.write("first;")
    await sleep(20)
    proxy.setDelay(0)
    client.socket.write("second;")
    await until("both chunks echoed", () => client.received() === "first;second;")
    // `second` waited for `first` (a delay of 0 did not let it pass)
    expect(client.arrivals[0]!.text.startsWith("first;")).toBe(true)
    expect(proxy.delay()).toEqual({ toTarget: 0, toClient: 0 })
  })

  it("a delay raised on an open connection applies to what comes next", async () => {
    const { proxy, client } = await setup()
    client.socket.write("fast;")
    await until("the fast chunk", () => client.received() === "fast;")
    proxy.setDelay({ toClient: 150 })
    expect(proxy.delay()).toEqual({ toTarget: 0, toClient: 150 })
    const at = performance.now()
    client.socket.write("slow;")
    await until("the slow chunk", () => client.received() === "fast;slow;")
    expect(client.arrivals.at(-1)!.at - at).toBeGreaterThanOrEqual(150 - 1)
  })

  it("a lost reply: the request reaches the target, its reply is dropped with the connection", async () => {
    const { proxy, client } = await setup()
    proxy.loseNextReply()
    client.socket.write("lost;")
    await client.closed
    expect(client.received()).toBe("")
    expect(proxy.lost()).toBe(1)
  })

  it("a held link delivers nothing the target sends from then on", async () => {
    const { proxy, client } = await setup()
    client.socket.write("before;")
    await until("the chunk before the hold", () => client.received() === "before;")
    proxy.hold()
    client.socket.write("after;")
    await sleep(100)
    expect(client.received()).toBe("before;")
  })

  it("a negative or non-finite delay is refused", async () => {
    const { proxy } = await setup()
    expect(() => proxy.setDelay(-1)).toThrow(RangeError)
    expect(() => proxy.setDelay({ toClient: Number.NaN })).toThrow(
      "a proxy delay must be a finite number of ms >= 0, got NaN",
    )
    await expect(startProxy({ host: "127.0.0.1", port: 1 }, { delayMs: -5 })).rejects.toThrow(
      RangeError,
    )
  })
})
