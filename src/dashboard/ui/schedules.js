// Every schedule: its pattern, its last tick's job and that job's status, its next run; pause,
// resume and trigger now.
import { act } from "./api.js";
import { html } from "./html.js";
import { JobLink } from "./nav.js";
import { ASK, localTime } from "./words.js";

const missed = (m) => (typeof m === "string" ? m : "catch up " + m.catchUp);
const scheduleAction = (action, name) => () => act("api/schedules/" + action + "?name=" + encodeURIComponent(name), ASK["schedule-" + action](name));

export const SchedulesTable = ({ schedules, lastJobs }) => {
  if (schedules.length === 0) return html`<p class="muted">no schedules</p>`;
  const last = new Map(lastJobs.map((j) => [j.schedule, j]));
  return html`<table>
    <thead><tr><th>schedule</th><th>task</th><th>cron</th><th>missed</th><th>last fired</th><th>its job</th><th>next run</th><th>then</th><th>state</th><th></th></tr></thead>
    <tbody>
      ${schedules.map((c) => {
        const job = last.get(c.name);
        return html`<tr key=${c.name} data-testid="schedule-row" data-schedule=${c.name}>
          <td>${c.name}</td><td>${c.task}</td><td><code>${c.cron}</code>${c.timezone ? " " + c.timezone : ""}</td><td>${missed(c.missed)}</td>
          <td>${c.lastFired ? localTime(c.lastFired) : "never"}</td>
          <td data-col="job">${!job ? "—" : job.id ? html`<${JobLink} id=${job.id} /> ${job.status}` : html`<span class="muted">none kept</span>`}</td>
          <td data-col="next">${c.pausedAt ? "—" : c.nextRun ? localTime(c.nextRun) : "never"}</td>
          <td class="muted" data-col="then">${c.pausedAt ? "" : (c.nextRuns ?? []).slice(1).map(localTime).join(", ")}</td>
          <td data-col="state">${c.pausedAt ? html`<span class="paused">paused</span>${c.pausedBy ? html` <span class="muted">by ${c.pausedBy}</span>` : ""}` : "running"}</td>
          <td>
            <button data-schedule-action=${c.pausedAt ? "resume" : "pause"} data-name=${c.name} onClick=${scheduleAction(c.pausedAt ? "resume" : "pause", c.name)}>${c.pausedAt ? "resume" : "pause"}</button>${" "}
            <button data-schedule-action="trigger" data-name=${c.name} onClick=${scheduleAction("trigger", c.name)}>trigger now</button>
          </td>
        </tr>`;
      })}
    </tbody>
  </table>`;
};
