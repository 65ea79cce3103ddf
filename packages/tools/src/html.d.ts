/** `.html` files are imported as text (the dashboard's page: tsup `loader`, and a vitest plugin in vitest.config.ts). */
declare module "*.html" {
  const text: string
  export default text
}
