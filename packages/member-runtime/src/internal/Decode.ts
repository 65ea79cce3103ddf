/**
 * A consumer's decoding of its messages (docs/runtime.md, "Typed messages"):
 * its codec turns the payload field into a value, its Standard Schema (if
 * any) validates it. A message that cannot be decoded or is invalid is
 * rejected with the reason: the runner dead-letters it at once, without
 * calling the handler and without a retry (it would fail the same way).
 */
import {
  CONTENT_TYPE_FIELD,
  type Codec,
  type CodecOption,
  codecOf,
  describeIssues,
  type Fields,
  PAYLOAD_FIELD,
  type StandardSchemaV1,
} from "../Codec.js"
import { describeError } from "../Logging.js"

export type Decoded =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly cause: "undecodable" | "invalid"; readonly reason: string }

/** Decode one message's fields: at once, or a promise when the schema validates asynchronously. */
export type Decoder = (fields: Fields) => Decoded | Promise<Decoded>

const rejected = (cause: "undecodable" | "invalid", reason: string): Decoded => ({
  ok: false,
  cause,
  reason: reason.slice(0, 1_000),
})

/** The payload of `fields` decoded by `codec` (never throws: a failure is a rejection). */
const decodePayload = (codec: Codec<unknown>, fields: Fields): Decoded => {
  const payload = fields[PAYLOAD_FIELD]
  if (payload === undefined)
    return rejected(
      "undecodable",
      `undecodable: no ${PAYLOAD_FIELD} field (codec ${codec.contentType}; docs/runtime.md, "The wire format")`,
    )
  const contentType = fields[CONTENT_TYPE_FIELD]
  if (contentType !== undefined && contentType !== codec.contentType)
    return rejected(
      "undecodable",
      `undecodable: content type ${JSON.stringify(contentType)}, the consumer's codec reads ${JSON.stringify(codec.contentType)}`,
    )
  try {
    return { ok: true, value: codec.decode(payload) }
  } catch (error) {
    return rejected("undecodable", `undecodable ${codec.contentType}: ${describeError(error)}`)
  }
}

const validated = (result: StandardSchemaV1.Result<unknown>): Decoded =>
  result.issues === undefined
    ? { ok: true, value: result.value }
    : rejected("invalid", `invalid: ${describeIssues(result.issues)}`)

/** A schema whose `validate` throws or rejects: the message is invalid, with that error. */
const validateThrew = (error: unknown): Decoded =>
  rejected("invalid", `invalid: the schema's validate threw: ${describeError(error)}`)

const isPromiseLike = (u: unknown): u is PromiseLike<unknown> =>
  typeof (u as { then?: unknown } | null)?.then === "function"

/**
 * The decoder of a consumer's options, or undefined when it has none (the
 * raw codec without a schema: the fields are the value, nothing to check).
 */
export const makeDecoder = (
  option: CodecOption<unknown> | undefined,
  schema: StandardSchemaV1 | undefined,
): Decoder | undefined => {
  const codec = codecOf(option)
  if (codec === undefined && schema === undefined) return undefined
  const validate = schema?.["~standard"].validate
  return (fields) => {
    const decoded: Decoded =
      codec === undefined ? { ok: true, value: fields } : decodePayload(codec, fields)
    if (!decoded.ok || validate === undefined) return decoded
    let result: ReturnType<typeof validate>
    try {
      result = validate(decoded.value)
    } catch (error) {
      return validateThrew(error)
    }
    return isPromiseLike(result)
      ? Promise.resolve(result).then(validated, validateThrew)
      : validated(result)
  }
}
