/** `.lua` files are imported as text (tsup `loader`, and a vitest plugin in vitest.config.ts). */
declare module "*.lua" {
  const source: string
  export default source
}

/** `.html` files are imported as text (the dashboard's page: tsup `loader`, and the vitest plugin). */
declare module "*.html" {
  const source: string
  export default source
}
