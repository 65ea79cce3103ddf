/**
 * Member identity (docs/runtime.md, "Identity"): the base member id, the
 * logical member ids (`-m0 .. -m{C-1}` for a listener with `concurrency: C`),
 * and the identity of every process start (docs/protocol.md rules 9 and 24).
 *
 * The default base id is unique per process: where the environment says an
 * address names one process (`POD_IP`, or `HOSTNAME` inside a Kubernetes pod)
 * it is that address, so a restarted pod comes back under its id and gets
 * its shards back (sticky); anywhere else (a laptop, a VM, several processes
 * in one container) it is the host name plus the process id, so two
 * processes on one host never share an id. Give `memberBase` (or a member's
 * `memberId`) a stable value to keep stickiness across restarts there.
 *
 * @example
 * memberBase({ POD_IP: "10.1.2.3" })                                  // "10.1.2.3"
 * memberBase({ KUBERNETES_SERVICE_HOST: "10.0.0.1", HOSTNAME: "web-7" }) // "web-7"
 * memberBase({}, "laptop", 4242)                                       // "laptop-4242"
 * logicalMemberIds("10.1.2.3", 2)    // ["10.1.2.3-m0", "10.1.2.3-m1"]
 * nextIncarnation()                  // Date.now() * 1024 + 10 random bits, strictly increasing
 * newInstance()                      // 24 hex digits: 96 random bits
 */
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"

/**
 * The base member id of this process: `POD_IP`; in a Kubernetes pod
 * (`KUBERNETES_SERVICE_HOST` set) its `HOSTNAME` (the pod name); else
 * `<host name>-<process id>`.
 */
export const memberBase = (
  env: Readonly<Record<string, string | undefined>> = process.env,
  host: string = hostname(),
  pid: number = process.pid,
): string => {
  const podIp = env.POD_IP?.trim()
  if (podIp) return podIp
  const podName = env.HOSTNAME?.trim()
  if (podName && env.KUBERNETES_SERVICE_HOST?.trim()) return podName
  return `${host.trim() || "localhost"}-${pid}`
}

/** The ids of a listener's logical members: `<base>-m0 .. <base>-m{concurrency-1}`. */
export const logicalMemberIds = (base: string, concurrency: number): Array<string> =>
  Array.from({ length: concurrency }, (_, i) => `${base}-m${i}`)

let lastIncarnation = 0

/**
 * A new incarnation: `Date.now() * 1024` plus 10 random bits, and strictly
 * larger than any incarnation handed out earlier in this process (two
 * starts in one millisecond, or a clock step backwards, still order). Two
 * processes can draw the same one: `newInstance` tells them apart.
 */
export const nextIncarnation = (now: number = Date.now()): number => {
  const candidate = now * 1024 + Math.floor(Math.random() * 1024)
  lastIncarnation = Math.max(candidate, lastIncarnation + 1)
  return lastIncarnation
}

/**
 * A process start's random identity: 96 random bits as 24 hex digits (at
 * least 64 are required: two live processes must never share one).
 */
export const newInstance = (): string => randomBytes(12).toString("hex")
