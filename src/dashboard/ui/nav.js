// Which job, worker, flow and workflow the page has open; a link anywhere opens one.
import { html } from "./html.js";
import { createStore } from "./store.js";

export const openJob = createStore(null);
export const openWorker = createStore(null);
export const openFlow = createStore(null);
export const openWorkflow = createStore(null);

const opening = (store, id) => (event) => {
  event.preventDefault();
  store.set(id);
};

const address = (kind, id) => "#" + kind + "-" + encodeURIComponent(id);

export const JobLink = ({ id }) => html`<a class="job" href=${address("job", id)} data-open=${id} onClick=${opening(openJob, id)}>${id}</a>`;
export const FlowLink = ({ id }) => html`<a class="job" href=${address("flow", id)} data-flow=${id} onClick=${opening(openFlow, id)}>${id}</a>`;
export const WorkflowLink = ({ id }) => html`<a class="job" href=${address("workflow", id)} data-workflow=${id} onClick=${opening(openWorkflow, id)}>${id}</a>`;
export const WorkerLink = ({ id }) => html`<a class="job" href=${address("worker", id)} data-worker=${id} onClick=${opening(openWorker, id)}>${id}</a>`;

// The page last opened is named in the address (#job-12, #workflow-5): a reload, a link pasted
// into an incident's channel and the back button open it again. The address names one page; the
// others close when it changes (back from a job opened on a workflow's page shows the workflow).
const PAGES = { job: openJob, flow: openFlow, workflow: openWorkflow, worker: openWorker };
const ADDRESS = /^#(job|flow|workflow|worker)-(.+)$/;

/** The page the address names, or null (none, or an address cut short when pasted: "%2" decodes to nothing). */
const named = () => {
  const m = ADDRESS.exec(location.hash);
  try {
    return m === null ? null : { kind: m[1], id: decodeURIComponent(m[2]) };
  } catch {
    return null;
  }
};

/** Opens the page the address names, and keeps the address naming the page opened last. */
export const followAddress = () => {
  const open = () => {
    const page = named();
    for (const [kind, store] of Object.entries(PAGES)) store.set(kind === page?.kind ? page.id : null);
  };
  for (const [kind, store] of Object.entries(PAGES)) {
    store.subscribe((id) => {
      const page = named();
      if (id !== null && (page?.kind !== kind || page.id !== id)) history.pushState(null, "", address(kind, id));
      else if (id === null && page?.kind === kind) {
        // Closed: the address names a page still open (the workflow a job was opened on), or none,
        // so that a reload opens what is on the screen.
        const still = Object.entries(PAGES).find(([, other]) => other.get() !== null);
        history.replaceState(null, "", still ? address(still[0], still[1].get()) : location.pathname + location.search);
      }
    });
  }
  addEventListener("popstate", open);
  open();
};

/** Bumped after an action on a job: the open job's page reads it again. */
export const jobsChanged = createStore(0);
