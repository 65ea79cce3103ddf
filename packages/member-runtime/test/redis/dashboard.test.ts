/**
 * `shardline dashboard` in Debian's Chromium (playwright-core): the check is
 * test/support/dashboardCheck.ts, the same for every browser.
 */
import { chromium } from "../support/dashboardBrowsers.js"
import { dashboardTest } from "../support/dashboardCheck.js"

dashboardTest(chromium())
