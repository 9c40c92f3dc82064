// A global set-up for test runners: one server and one migrated template for the whole run, handed
// to every test file's process through the environment (see database.ts).
//   vitest:     test: { globalSetup: ["picket/testing/global-setup"] }   (uses setup / teardown)
//   node:test:  node --test --test-global-setup=./node_modules/picket/dist/testing/global-setup.js
//               (globalSetup / globalTeardown; a file's path: node resolves no package name there)
import { startTestServer, type TestServer } from "./database.ts";

let server: TestServer | undefined;

export async function setup(): Promise<() => Promise<void>> {
  server ??= await startTestServer();
  return teardown;
}

export async function teardown(): Promise<void> {
  const running = server;
  server = undefined;
  await running?.stop();
}

export { setup as globalSetup, teardown as globalTeardown };
