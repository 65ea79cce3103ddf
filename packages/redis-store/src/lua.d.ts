/** `.lua` files are imported as text (tsup `loader`, and a vitest plugin in vitest.config.ts). */
declare module "*.lua" {
  const source: string
  export default source
}
