// Debian's Chromium, driven by playwright-core, for the tests that open the dashboard in a real browser.
import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";

export const CHROMIUM = process.env.CHROMIUM_PATH ?? (existsSync("/usr/bin/chromium") ? "/usr/bin/chromium" : "chromium");

/** A headless Chromium as the tests run it (root in CI: no sandbox; a small /dev/shm: none used). */
export const launchChromium = (): Promise<Browser> => chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-dev-shm-usage"] });
