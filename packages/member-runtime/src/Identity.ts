/**
 * Member identity (docs/runtime.md, "Identity"): the base member id comes
 * from the pod's address (`POD_IP`, then `HOSTNAME`, then the first
 * non-internal interface address), a listener with `concurrency: C` adds
 * `-m0 .. -m{C-1}`, and every process start is a new incarnation of each
 * logical member (docs/protocol.md rule 9).
 *
 * @example
 * memberBase({ POD_IP: "10.1.2.3" }) // "10.1.2.3"
 * logicalMemberIds("10.1.2.3", 2)    // ["10.1.2.3-m0", "10.1.2.3-m1"]
 * nextIncarnation()                  // Date.now() * 1024 + 10 random bits, strictly increasing
 */
import { type NetworkInterfaceInfo, networkInterfaces } from "node:os"

type Interfaces = Record<string, ReadonlyArray<NetworkInterfaceInfo> | undefined>

/**
 * The base member id of this process: `POD_IP`, then `HOSTNAME`, then the
 * first non-internal IPv4 address (then IPv6), else `localhost`.
 */
export const memberBase = (
  env: Readonly<Record<string, string | undefined>> = process.env,
  interfaces: Interfaces = networkInterfaces(),
): string => {
  const podIp = env.POD_IP?.trim()
  if (podIp) return podIp
  const host = env.HOSTNAME?.trim()
  if (host) return host
  const external = Object.keys(interfaces)
    .sort()
    .flatMap((name) => interfaces[name] ?? [])
    .filter((i) => !i.internal)
  const address =
    external.find((i) => i.family === "IPv4")?.address ?? external[0]?.address ?? "localhost"
  return address
}

/** The ids of a listener's logical members: `<base>-m0 .. <base>-m{concurrency-1}`. */
export const logicalMemberIds = (base: string, concurrency: number): Array<string> =>
  Array.from({ length: concurrency }, (_, i) => `${base}-m${i}`)

let lastIncarnation = 0

/**
 * A new incarnation: `Date.now() * 1024` plus 10 random bits, and strictly
 * larger than any incarnation handed out earlier in this process (two
 * starts in one millisecond, or a clock step backwards, still order).
 */
export const nextIncarnation = (now: number = Date.now()): number => {
  const candidate = now * 1024 + Math.floor(Math.random() * 1024)
  lastIncarnation = Math.max(candidate, lastIncarnation + 1)
  return lastIncarnation
}
