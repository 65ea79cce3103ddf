/**
 * `shardline dashboard` in Debian's Firefox ESR (puppeteer-core, WebDriver
 * BiDi): the check is test/support/dashboardCheck.ts, the same for every
 * browser.
 */
import { firefox } from "../support/dashboardBrowsers.js"
import { dashboardTest } from "../support/dashboardCheck.js"

dashboardTest(firefox())
