/// <reference lib="dom" />
/**
 * The browsers the dashboard test drives (test/support/dashboardCheck.ts):
 * Debian's Chromium through playwright-core, Debian's Firefox ESR through
 * puppeteer-core (WebDriver BiDi). Both are system browsers installed by
 * `pnpm test`'s scripts/ensure-servers.mjs; nothing is downloaded.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { type BrowserContext, chromium as playwrightChromium } from "playwright-core"
import puppeteer, { type Browser as PuppeteerBrowser } from "puppeteer-core"

/** What the check does with a page, in either driver. */
export interface DashboardPage {
  readonly goto: (url: string) => Promise<void>
  readonly waitForSelector: (selector: string) => Promise<void>
  readonly text: (selector: string) => Promise<string | null>
  readonly evaluate: <T>(fn: () => T) => Promise<T>
  readonly screenshot: (file: string) => Promise<void>
  /** Uncaught errors the page raised. */
  readonly errors: ReadonlyArray<string>
}

export interface DashboardBrowser {
  readonly name: string
  /** The screenshot's file name in test-output/. */
  readonly screenshot: string
  /** Why the browser cannot run here (what to install), or undefined. */
  readonly missing: () => string | undefined
  readonly open: () => Promise<DashboardPage>
  readonly close: () => Promise<void>
}

const VIEWPORT = { width: 1360, height: 1000 }

const absent = (bin: string, variable: string, apt: string) =>
  existsSync(bin)
    ? undefined
    : `${bin} is missing: run node scripts/ensure-servers.mjs (apt-get install ${apt}), or set ${variable}`

export const chromium = (): DashboardBrowser => {
  const bin = process.env.SHARDLINE_CHROMIUM_BIN ?? "/usr/bin/chromium"
  let context: BrowserContext | undefined
  let userDataDir: string | undefined
  return {
    name: "chromium",
    screenshot: "dashboard.png",
    missing: () => absent(bin, "SHARDLINE_CHROMIUM_BIN", "chromium"),
    open: async () => {
      userDataDir = mkdtempSync(path.join(tmpdir(), "shardline-chromium-"))
      context = await playwrightChromium.launchPersistentContext(userDataDir, {
        executablePath: bin,
        headless: true,
        viewport: VIEWPORT,
        args: [
          "--headless",
          "--no-sandbox",
          "--disable-gpu",
          "--disable-quic",
          "--no-first-run",
          "--disable-background-networking",
          "--disable-component-update",
          "--disable-sync",
        ],
      })
      const page = context.pages()[0] ?? (await context.newPage())
      const errors: Array<string> = []
      page.on("pageerror", (e) => errors.push(String(e)))
      return {
        goto: async (url) => {
          await page.goto(url)
        },
        waitForSelector: async (selector) => {
          await page.waitForSelector(selector)
        },
        text: (selector) => page.textContent(selector),
        evaluate: (fn) => page.evaluate(fn),
        screenshot: async (file) => {
          await page.screenshot({ path: file, fullPage: true })
        },
        errors,
      }
    },
    close: async () => {
      await context?.close()
      if (userDataDir !== undefined) rmSync(userDataDir, { recursive: true, force: true })
    },
  }
}

export const firefox = (): DashboardBrowser => {
  const bin = process.env.SHARDLINE_FIREFOX_BIN ?? "/usr/bin/firefox-esr"
  let browser: PuppeteerBrowser | undefined
  return {
    name: "firefox",
    screenshot: "dashboard-firefox.png",
    missing: () => absent(bin, "SHARDLINE_FIREFOX_BIN", "firefox-esr"),
    open: async () => {
      browser = await puppeteer.launch({
        browser: "firefox",
        executablePath: bin,
        headless: true,
        defaultViewport: VIEWPORT,
      })
      const page = await browser.newPage()
      const errors: Array<string> = []
      page.on("pageerror", (e) => errors.push(String(e)))
      return {
        goto: async (url) => {
          await page.goto(url)
        },
        waitForSelector: async (selector) => {
          await page.waitForSelector(selector)
        },
        text: (selector) => page.$eval(selector, (e) => e.textContent),
        evaluate: (fn) => page.evaluate(fn) as Promise<Awaited<ReturnType<typeof fn>>>,
        screenshot: async (file) => {
          await page.screenshot({ path: file as `${string}.png`, fullPage: true })
        },
        errors,
      }
    },
    close: async () => {
      await browser?.close()
    },
  }
}
