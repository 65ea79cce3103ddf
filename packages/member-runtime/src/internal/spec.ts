/**
 * Resolving consumer declarations into what the runtime runs: validated
 * settings with defaults, the logical member ids, the worker count per
 * member, and the handler and hooks as Effects.
 */
import { Effect, Result } from "effect"
import {
  type ConsumerSettings,
  decodeOptions,
  type GroupSettings,
  groupSettingsDiffer,
  invalid,
  ListenerOptionsSchema,
  type LostHookInfo,
  MemberOptionsSchema,
  resolveSettings,
  type ShardHookInfo,
} from "../Config.js"
import type { ConsumerDefinition } from "../Consumer.js"
import type { InvalidRuntimeConfig } from "../Errors.js"
import { logicalMemberIds } from "../Identity.js"
import type { Batch, BatchContext, Message, MessageContext } from "../Message.js"
import { type CallAborted, callUser, callUserEffect, type UserCodeFailed } from "./invoke.js"

/**
 * A handler as the poller calls it: it ends early with `CallAborted` when
 * the context's signal aborts, and `settled` is called once the user code
 * has really finished (a promise keeps running after the runtime stopped
 * waiting for it).
 */
export type InternalHandler =
  | {
      readonly kind: "message"
      readonly run: (
        m: Message,
        ctx: MessageContext,
        settled: () => void,
      ) => Effect.Effect<void, UserCodeFailed | CallAborted>
      /**
       * The plain handler, called directly (no fiber per message): a
       * synchronous return is a success at once; a promise (or an Effect) it
       * returns is awaited as `run` would. Absent for Effect-style handlers.
       */
      readonly direct?: (m: Message, ctx: MessageContext) => unknown
    }
  | {
      readonly kind: "batch"
      readonly autoResolve: boolean
      readonly run: (
        b: Batch,
        ctx: BatchContext,
        settled: () => void,
      ) => Effect.Effect<void, UserCodeFailed | CallAborted>
      /** The plain batch handler, called directly, as the per-message `direct`. */
      readonly direct?: (b: Batch, ctx: BatchContext) => unknown
    }

export interface InternalHooks {
  readonly onAssigned: ((info: ShardHookInfo) => Effect.Effect<void, UserCodeFailed>) | undefined
  readonly onRevoked: ((info: ShardHookInfo) => Effect.Effect<void, UserCodeFailed>) | undefined
  readonly onLost: ((info: LostHookInfo) => Effect.Effect<void, UserCodeFailed>) | undefined
}

export interface ConsumerSpec {
  readonly label: string
  readonly kind: "member" | "listener"
  readonly settings: ConsumerSettings
  readonly memberIds: ReadonlyArray<string>
  readonly workersPerMember: number
  readonly handler: InternalHandler
  readonly hooks: InternalHooks
}

type AnyFn = (...args: ReadonlyArray<never>) => unknown

const wrap =
  (style: "promise" | "effect", f: AnyFn) =>
  (
    settled: (() => void) | undefined,
    signal: AbortSignal | undefined,
    ...args: ReadonlyArray<unknown>
  ) => {
    const g = f as (...args: ReadonlyArray<unknown>) => unknown
    return style === "effect"
      ? callUserEffect(() => g(...args) as Effect.Effect<void, unknown>, settled, signal)
      : callUser(() => g(...args), settled, signal)
  }

/** Hooks: a failure is reported as a `UserCodeFailed`; they are bounded by the caller. */
const hookOf = <I>(style: "promise" | "effect", f: unknown) => {
  if (typeof f !== "function") return undefined
  const call = wrap(style, f as AnyFn)
  return (info: I): Effect.Effect<void, UserCodeFailed> =>
    call(undefined, undefined, info) as Effect.Effect<void, UserCodeFailed>
}

const hooksOf = (style: "promise" | "effect", o: Record<string, unknown>): InternalHooks => ({
  onAssigned: hookOf<ShardHookInfo>(style, o.onAssigned),
  onRevoked: hookOf<ShardHookInfo>(style, o.onRevoked),
  onLost: hookOf<LostHookInfo>(style, o.onLost),
})

const handlerOf = (
  kind: "message" | "batch",
  style: "promise" | "effect",
  f: AnyFn,
  autoResolve: boolean,
): InternalHandler => {
  const run = wrap(style, f)
  const g = f as (...args: ReadonlyArray<unknown>) => unknown
  // an Effect a promise-style handler returns is a plain value (as callUser treats it)
  const direct =
    style === "promise"
      ? (input: Message | Batch, ctx: MessageContext) => {
          const result = g(input, ctx)
          return Effect.isEffect(result) ? undefined : result
        }
      : undefined
  return kind === "message"
    ? {
        kind,
        run: (m, ctx, settled) => run(settled, ctx.signal, m, ctx),
        ...(direct !== undefined ? { direct } : {}),
      }
    : {
        kind,
        autoResolve,
        run: (b, ctx, settled) => run(settled, ctx.signal, b, ctx),
        ...(direct !== undefined ? { direct } : {}),
      }
}

/** Resolve one declaration; `label` names it in errors. */
export const resolveDefinition = (
  def: ConsumerDefinition,
  label: string,
  memberBase: string,
): Result.Result<ConsumerSpec, InvalidRuntimeConfig> => {
  if (def.kind === "listener") {
    const decoded = decodeOptions(ListenerOptionsSchema, def.options, label)
    if (Result.isFailure(decoded)) return Result.fail(decoded.failure)
    const o = decoded.success
    const settings = resolveSettings(o, label)
    if (Result.isFailure(settings)) return Result.fail(settings.failure)
    if (def.method === undefined) return Result.fail(invalid(label, "a listener needs a method"))
    return Result.succeed({
      label,
      kind: "listener",
      settings: settings.success,
      memberIds: logicalMemberIds(memberBase, o.concurrency ?? 1),
      workersPerMember: o.workersPerMember ?? 1,
      handler: handlerOf(
        o.batch === true ? "batch" : "message",
        def.style,
        def.method,
        o.autoResolve ?? true,
      ),
      hooks: hooksOf(def.style, o as Record<string, unknown>),
    })
  }
  const decoded = decodeOptions(MemberOptionsSchema, def.options, label)
  if (Result.isFailure(decoded)) return Result.fail(decoded.failure)
  const o = decoded.success
  const settings = resolveSettings(o, label)
  if (Result.isFailure(settings)) return Result.fail(settings.failure)
  const at = (field: string) => (label === "" ? field : `${label}.${field}`)
  if (o.eachMessage !== undefined && o.eachBatch !== undefined)
    return Result.fail(invalid(at("eachBatch"), "give either eachMessage or eachBatch, not both"))
  const f = o.eachMessage ?? o.eachBatch
  if (f === undefined)
    return Result.fail(invalid(at("eachMessage"), "a consumer needs eachMessage or eachBatch"))
  return Result.succeed({
    label,
    kind: "member",
    settings: settings.success,
    memberIds: [o.memberId ?? memberBase],
    workersPerMember: o.runtimeMaxConcurrency ?? 1,
    handler: handlerOf(
      o.eachMessage !== undefined ? "message" : "batch",
      def.style,
      f,
      o.autoResolve ?? true,
    ),
    hooks: hooksOf(def.style, o as Record<string, unknown>),
  })
}

/**
 * Checks across declarations: a member id appears once per group, and every
 * declaration of a group agrees on its coordinator settings.
 */
export const checkAcross = (
  specs: ReadonlyArray<ConsumerSpec>,
): Result.Result<void, InvalidRuntimeConfig> => {
  const ids = new Map<string, string>()
  const groups = new Map<string, { readonly label: string; readonly settings: GroupSettings }>()
  for (const spec of specs) {
    const group = JSON.stringify([spec.settings.stream, spec.settings.group])
    for (const id of spec.memberIds) {
      if (id.length > 256)
        return Result.fail(
          invalid(
            spec.kind === "member" ? `${spec.label}.memberId` : "memberBase",
            `member id ${id.slice(0, 40)}... is longer than 256 characters`,
          ),
        )
      const key = JSON.stringify([spec.settings.stream, spec.settings.group, id])
      const other = ids.get(key)
      if (other !== undefined)
        return Result.fail(
          invalid(
            `${spec.label}.${spec.kind === "member" ? "memberId" : "concurrency"}`,
            `member id ${id} of group ${spec.settings.group} on ${spec.settings.stream} is also used by ${other}`,
          ),
        )
      ids.set(key, spec.label)
    }
    const first = groups.get(group)
    if (first === undefined) groups.set(group, { label: spec.label, settings: spec.settings })
    else {
      const field = groupSettingsDiffer(first.settings, spec.settings)
      if (field !== undefined)
        return Result.fail(
          invalid(
            `${spec.label}.${field}`,
            `differs from ${first.label} for the same group (${spec.settings[field]} vs ${first.settings[field]})`,
          ),
        )
    }
  }
  return Result.succeed(undefined)
}
