/**
 * Typed messages (docs/runtime.md, "Typed messages"): a codec turns a value
 * into an entry's fields and back, and an optional Standard Schema validates
 * what a consumer decoded. The wire format (docs/runtime.md, "The wire
 * format") is plain stream fields, so a service in any language can produce:
 *
 * | field                    | holds                                            |
 * |--------------------------|--------------------------------------------------|
 * | `shardline-key`          | the routing key (UTF-8 string)                   |
 * | `shardline-payload`      | the encoded value (UTF-8 string; JSON for `json`)|
 * | `shardline-content-type` | the codec's content type (`application/json`)    |
 *
 * The `raw` codec (the default) is the string map itself: every field but
 * the key is the value, as before typed messages existed.
 *
 * @example
 * const orders = consumer({
 *   stream: "orders",
 *   group: "billing",
 *   codec: "json",
 *   schema: z.object({ amount: z.number() }), // any Standard Schema: zod, valibot, effect Schema
 *   eachMessage: async (message) => bill(message.key, message.value.amount),
 * })
 * await runtime.producer<{ amount: number }>("orders", { codec: "json" }).send("customer-42", { amount: 12.5 })
 */

/** An entry's fields: a string map. */
export type Fields = Readonly<Record<string, string>>

/** The field a typed producer stores the encoded value in (docs/runtime.md, "The wire format"). */
export const PAYLOAD_FIELD = "shardline-payload"

/** The field naming the payload's content type (`application/json` for the `json` codec). */
export const CONTENT_TYPE_FIELD = "shardline-content-type"

/**
 * A codec of its own: `encode` turns a value into the payload string,
 * `decode` turns a payload back (throw when it cannot: the message is then
 * dead-lettered, never retried). `contentType` is written beside the payload
 * and checked on decode when the entry has one.
 *
 * @example
 * const csv: Codec<[string, number]> = {
 *   contentType: "text/csv",
 *   encode: ([name, n]) => `${name},${n}`,
 *   decode: (payload) => {
 *     const [name, n] = payload.split(",")
 *     if (name === undefined || n === undefined) throw new Error("expected name,number")
 *     return [name, Number(n)]
 *   },
 * }
 */
export interface Codec<T> {
  readonly contentType: string
  readonly encode: (value: T) => string
  readonly decode: (payload: string) => T
}

/**
 * Where a consumer's or producer's codec comes from: `raw` (default: the
 * fields are the value), `json` (`JSON.stringify` / `JSON.parse` of the
 * payload field), or a `Codec` object.
 */
export type CodecOption<T> = "raw" | "json" | Codec<T>

/** The `json` codec (`application/json`). */
export const jsonCodec: Codec<unknown> = {
  contentType: "application/json",
  encode: (value) => {
    const text = JSON.stringify(value)
    // JSON.stringify returns undefined for undefined, functions and symbols
    if (typeof text !== "string") throw new TypeError(`${typeof value} is not JSON`)
    return text
  },
  decode: (payload) => JSON.parse(payload) as unknown,
}

// ---------------------------------------------------------------------------
// Standard Schema (https://standardschema.dev): the interface zod, valibot
// and effect Schema (`Schema.toStandardSchemaV1`) implement, declared here so
// that no validation library is a dependency of the runtime.

/** A Standard Schema v1 (the `~standard` property zod, valibot and others implement). */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly "~standard": StandardSchemaV1.Props<Input, Output>
}

export declare namespace StandardSchemaV1 {
  interface Props<Input = unknown, Output = Input> {
    readonly version: 1
    readonly vendor: string
    readonly validate: (value: unknown) => Result<Output> | Promise<Result<Output>>
    readonly types?: Types<Input, Output> | undefined
  }
  type Result<Output> = SuccessResult<Output> | FailureResult
  interface SuccessResult<Output> {
    readonly value: Output
    readonly issues?: undefined
  }
  interface FailureResult {
    readonly issues: ReadonlyArray<Issue>
  }
  interface Issue {
    readonly message: string
    readonly path?: ReadonlyArray<PropertyKey | PathSegment> | undefined
  }
  interface PathSegment {
    readonly key: PropertyKey
  }
  interface Types<Input = unknown, Output = Input> {
    readonly input: Input
    readonly output: Output
  }
}

/** Is `u` a Standard Schema (has a `~standard` with a `validate` function)? */
export const isStandardSchema = (u: unknown): u is StandardSchemaV1 =>
  (typeof u === "object" || typeof u === "function") &&
  u !== null &&
  typeof (u as { "~standard"?: { validate?: unknown } })["~standard"]?.validate === "function"

/** Is `u` a usable codec option (`raw`, `json`, or `{ contentType, encode, decode }`)? */
export const isCodecOption = (u: unknown): u is CodecOption<unknown> =>
  u === "raw" ||
  u === "json" ||
  (typeof u === "object" &&
    u !== null &&
    typeof (u as Codec<unknown>).contentType === "string" &&
    typeof (u as Codec<unknown>).encode === "function" &&
    typeof (u as Codec<unknown>).decode === "function")

/** The codec object of an option; undefined for `raw`. */
export const codecOf = (option: CodecOption<unknown> | undefined): Codec<unknown> | undefined =>
  option === undefined || option === "raw" ? undefined : option === "json" ? jsonCodec : option

/** "at items.0.amount: Expected number" from a schema's issues (at most 5, 1,000 characters). */
export const describeIssues = (issues: ReadonlyArray<StandardSchemaV1.Issue>): string =>
  issues
    .slice(0, 5)
    .map((issue) => {
      const path = (issue.path ?? [])
        .map((p) => String(typeof p === "object" && p !== null ? p.key : p))
        .join(".")
      return path === "" ? issue.message : `at ${path}: ${issue.message}`
    })
    .join("; ")
    .slice(0, 1_000)

/**
 * The fields a typed send appends (without the key): the payload and its
 * content type. Throws what the codec's `encode` throws.
 */
export const encodeFields = (codec: Codec<unknown>, value: unknown): Fields => {
  const payload = codec.encode(value)
  if (typeof payload !== "string")
    throw new TypeError(`the codec's encode returned ${typeof payload}, not a string`)
  return { [PAYLOAD_FIELD]: payload, [CONTENT_TYPE_FIELD]: codec.contentType }
}
