import { type Command, Option } from "commander";
import { jobMachine, machineJson, machineMermaid, supervisorMachine } from "../machines/index.ts";

const MACHINES = { job: jobMachine, supervisor: supervisorMachine };

export const machinesCommand = (program: Command): void => {
  program
    .command("machines")
    .description("print the job and supervisor machines: a config for Stately's editor or createMachine (json), or a Mermaid diagram")
    .addOption(new Option("--format <format>", "json or mermaid").choices(["json", "mermaid"]).default("mermaid"))
    .addOption(
      new Option("--machine <machine>", "which machine: job, supervisor or all (default: job for json, which Stately's editor imports as is; all for mermaid)").choices([
        ...Object.keys(MACHINES),
        "all",
      ]),
    )
    .action((options: { format: "json" | "mermaid"; machine?: keyof typeof MACHINES | "all" }) => {
      const which = options.machine ?? (options.format === "json" ? "job" : "all");
      const machines = which === "all" ? Object.values(MACHINES) : [MACHINES[which]];
      if (options.format === "json") {
        // One machine: its config, as Stately's editor imports it. All: an array of them, for tools.
        process.stdout.write(machines.length === 1 ? `${machineJson(machines[0]!)}\n` : `[${machines.map(machineJson).join(",\n")}]\n`);
        return;
      }
      // One machine: its diagram alone (for mmdc and the like). Both: each in its own Markdown
      // fence, since one Mermaid text holds one diagram.
      process.stdout.write(
        machines.length === 1 ? machineMermaid(machines[0]!) : machines.map((m) => `\`\`\`mermaid\n%% the ${m.id} machine\n${machineMermaid(m)}\`\`\`\n`).join("\n"),
      );
    });
};
