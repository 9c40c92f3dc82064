// The job browser: a state's jobs, filtered (task, queue, worker, key, text, time), newest or
// oldest first, a page at a time (GET api/jobs, keyset); bulk actions over the same filter, each
// counted and confirmed first (api/bulk/<action>/count, then POST with the count expected).
import { useEffect, useRef, useState } from "preact/hooks";
import { act, getJson, tell, token } from "./api.js";
import { html } from "./html.js";
import { JobLink, jobsChanged, openJob } from "./nav.js";
import { useStore } from "./store.js";
import { localTime } from "./words.js";

/** Each state the browser shows, and what its time column means. */
const STATES = [
  ["ready", "due since"], ["scheduled", "due at"], ["retrying", "retry at"], ["waiting", "enqueued at"], ["running", "claimed at"],
  ["dead", "died at"], ["completed", "completed at"], ["cancelled", "cancelled at"],
];
// The bulk actions each state offers (what the server would refuse is not shown).
const BULK = {
  ready: [["cancel", "cancel all"]],
  scheduled: [["run-now", "run all now"], ["cancel", "cancel all"]],
  retrying: [["run-now", "run all now"], ["cancel", "cancel all"]],
  waiting: [["cancel", "cancel all"]],
  running: [["cancel", "cancel all"]],
  dead: [["retry", "retry all"], ["delete", "delete all"]],
  completed: [["delete", "delete all"]],
  cancelled: [["delete", "delete all"]],
};
const BULK_VERB = { retry: "Retry", cancel: "Cancel", "run-now": "Run now", delete: "Delete" };
const BULK_AFTER = { retry: "They run again with fresh attempts.", cancel: "Pending ones never run; running ones are told to stop.", "run-now": "They become due at once.", delete: "This cannot be undone." };

/** The browser's filter as query parameters: the state and every field filled in. */
const filterOf = (state, form) => {
  const params = new URLSearchParams({ state });
  for (const [name, value] of new FormData(form)) {
    if (!value) continue;
    params.set(name, name === "before" ? new Date(value).toISOString() : value);
  }
  return params;
};

/**
 * The tabs as a keyboard user expects them (WAI-ARIA tabs): Tab reaches the selected one, the
 * arrow keys (and Home, End) select the next, the previous, the first or the last, and move focus.
 */
const arrowKeys = (state, setState) => (event) => {
  const names = STATES.map(([s]) => s);
  const at = names.indexOf(state);
  const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: names.length - 1 }[event.key];
  if (to === undefined) return;
  event.preventDefault();
  const next = names[(to + names.length) % names.length];
  setState(next);
  event.currentTarget.querySelector('[data-browse="' + next + '"]').focus();
};

export const JobBrowser = () => {
  const [state, setState] = useState("ready");
  const [page, setPage] = useState(null);
  const form = useRef(null);
  const seq = useRef(0);
  const tokenValue = useStore(token);
  const changed = useStore(jobsChanged);

  const browse = async (more, submitted = false) => {
    // Only the latest request's answer is shown: an earlier one (another tab, the page's first) answered late is dropped.
    const mine = ++seq.current;
    const params = filterOf(state, form.current);
    if (params.get("before")) {
      params.set("to", params.get("before"));
      params.delete("before");
    }
    // A job id typed in the search box opens that job, when the search is asked for (not again on
    // every tab switch or action after it, which would reopen a page the operator closed).
    const text = params.get("text")?.trim();
    if (submitted && text && /^[1-9][0-9]{0,18}$/.test(text)) return openJob.set(text);
    if (more && page?.next) params.set("after", page.next);
    const { ok, body } = await getJson("api/jobs?" + params);
    if (mine !== seq.current) return;
    if (!ok) return setPage({ error: body.error });
    setPage({ jobs: more ? [...page.jobs, ...body.jobs] : body.jobs, next: body.next, searchedTo: body.searchedTo });
  };
  useEffect(() => void browse(false), [state, tokenValue, changed]);

  const bulk = async (action) => {
    const all = filterOf(state, form.current);
    const params = new URLSearchParams({ state });
    for (const name of ["task", "queue", "before"]) if (all.get(name)) params.set(name, all.get(name));
    const { ok, body } = await getJson("api/bulk/" + action + "/count?" + params);
    if (!ok) return tell(body.error, true);
    if (body.count === 0) return tell("no " + state + " jobs match: nothing to do", false);
    const what =
      body.count.toLocaleString("en-US") + " " + state + " job" + (body.count === 1 ? "" : "s") +
      (params.get("task") ? " of task " + params.get("task") : "") + (params.get("queue") ? " in queue " + params.get("queue") : "") +
      (params.get("before") ? " before " + localTime(params.get("before")) : "");
    params.set("expected", String(body.count));
    const question = BULK_VERB[action] + " " + what + "? " + BULK_AFTER[action] + " At most that many are changed, in batches.";
    if (await act("api/bulk/" + action + "?" + params, [question, BULK_VERB[action].toLowerCase() + " " + body.count.toLocaleString("en-US")])) jobsChanged.set((n) => n + 1);
  };

  const label = STATES.find(([s]) => s === state)[1];
  return html`
    <div class="tabs" role="tablist" id="browse-tabs" aria-label="job state" onKeyDown=${arrowKeys(state, setState)}>
      ${STATES.map(([s]) => html`<button type="button" role="tab" key=${s} data-browse=${s} aria-selected=${String(s === state)} tabindex=${s === state ? 0 : -1} onClick=${() => setState(s)}>${s}</button>`)}
    </div>
    <form id="browse-form" ref=${form} onSubmit=${(event) => (event.preventDefault(), browse(false, true))}>
      <label>task <input name="task" autocomplete="off" /></label>
      <label>queue <input name="queue" autocomplete="off" /></label>
      <label>worker <input name="worker" autocomplete="off" /></label>
      <label>key <input name="key" autocomplete="off" /></label>
      <label>search <input name="text" autocomplete="off" placeholder="a job id, or text in payload or error" /></label>
      <label>before <input name="before" type="datetime-local" step="1" /></label>
      <select name="order" aria-label="order"><option value="">usual order</option><option value="newest">newest first</option><option value="oldest">oldest first</option></select>
      <button type="submit">find</button>
    </form>
    <div id="bulk" class="buttons">${BULK[state].map(([action, text]) => html`<button type="button" key=${action} data-bulk=${action} onClick=${() => bulk(action)}>${text}</button> `)}</div>
    <div id="browse-results">${page && html`<${Results} page=${page} state=${state} label=${label} more=${() => browse(true)} />`}</div>
  `;
};

const Results = ({ page, state, label, more }) => {
  if (page.error) return html`<p class="bad" data-testid="browse-error">${page.error}</p>`;
  return html`
    ${page.jobs.length === 0 && !page.next
      ? html`<p class="muted" data-testid="browse-empty">no ${state} jobs match</p>`
      : html`<table>
          <thead><tr><th>job</th><th>task</th><th>queue</th><th>key</th><th class="num">attempts</th><th>${label}</th><th>worker</th><th>last error</th></tr></thead>
          <tbody id="browse-table">
            ${page.jobs.map(
              (j) => html`<tr key=${j.id} data-testid="browse-row" data-job-id=${j.id}>
                <td><${JobLink} id=${j.id} /></td><td>${j.type}</td><td>${j.queue ?? ""}</td><td>${j.key ?? ""}</td>
                <td class="num">${j.attempts}${j.maxAttempts ? "/" + j.maxAttempts : ""}</td><td>${localTime(j.at)}</td><td>${j.lockedBy ?? ""}</td><td class="bad">${j.lastError ?? ""}</td>
              </tr>`,
            )}
          </tbody>
        </table>`}
    <p id="browse-more-line">
      ${page.next === null
        ? html`<span class="muted" data-testid="browse-end">end of the list</span>`
        : html`${page.searchedTo && html`<span class="muted" data-testid="browse-searched">searched back to ${localTime(page.searchedTo)} without filling the page · </span>`}<button type="button" id="browse-more" onClick=${more}>more</button>`}
    </p>
  `;
};
