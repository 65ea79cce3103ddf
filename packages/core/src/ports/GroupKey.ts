/**
 * A consumer group is identified by (stream, group): Redis consumer-group
 * names are per stream, so `workers` on `orders` and `workers` on `payments`
 * are two groups with two coordinators, two snapshots, two leases and two
 * sets of owner tokens (docs/redis.md). Every port is keyed by it.
 */

export interface GroupKey {
  readonly stream: string
  readonly group: string
}

/**
 * The key of a group, from its parts or from a `GroupConfig`.
 *
 * @example
 * groupKey("orders", "workers") // { stream: "orders", group: "workers" }
 * groupKeyOf(config)            // { stream: config.stream, group: config.groupId }
 */
export const groupKey = (stream: string, group: string): GroupKey => ({ stream, group })

export const groupKeyOf = (config: {
  readonly stream: string
  readonly groupId: string
}): GroupKey => ({ stream: config.stream, group: config.groupId })

/**
 * An unambiguous string for a key (map keys of the memory implementations):
 * stream and group may contain any character, so no separator is safe.
 */
export const groupKeyString = (key: GroupKey): string => JSON.stringify([key.stream, key.group])
