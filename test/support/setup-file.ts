// Runs before every test file. The hooks are registered here rather than in the modules they
// call: a module-level hook registers only in the first file that imports the module when vitest
// runs files without isolation (as the mutation run does), and later files would leak workers.
import { afterEach, beforeEach } from "vitest";
import "./spawn-guard.ts";
import { forgetBuiltStatements } from "../../src/db/schema-name.ts";
import { stopStartedWorkers } from "./worker.ts";

afterEach(stopStartedWorkers);
// Every test builds the statements it uses, so Stryker credits it with reaching their builders.
beforeEach(forgetBuiltStatements);
