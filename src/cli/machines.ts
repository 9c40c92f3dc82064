import type { Command } from "commander";
import { jobMachine, machineJson, machineMermaid, supervisorMachine } from "../machines/index.ts";

export const machinesCommand = (program: Command): void => {
  program
    .command("machines")
    .description("print the job and supervisor machines (JSON for the Stately visualizer, or Mermaid)")
    .option("--format <format>", "json or mermaid", "mermaid")
    .action((options: { format: string }) => {
      if (options.format !== "json" && options.format !== "mermaid") {
        throw new Error(`--format must be json or mermaid (got "${options.format}")`);
      }
      const machines = [jobMachine, supervisorMachine];
      process.stdout.write(
        options.format === "json"
          ? `[${machines.map(machineJson).join(",\n")}]\n`
          : machines.map((m) => `%% ${m.id} machine\n${machineMermaid(m)}`).join("\n"),
      );
    });
};
