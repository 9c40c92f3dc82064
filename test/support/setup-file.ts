// Runs before every test file. The hook is registered here rather than where startWorker lives:
// a module-level hook registers only in the first file that imports the module when vitest runs
// files without isolation (as the mutation run does), and later files would leak their workers.
import { afterEach } from "vitest";
import { stopStartedWorkers } from "./worker.ts";

afterEach(stopStartedWorkers);
