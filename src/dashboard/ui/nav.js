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

export const JobLink = ({ id }) => html`<a class="job" href=${"#job-" + id} data-open=${id} onClick=${opening(openJob, id)}>${id}</a>`;
export const FlowLink = ({ id }) => html`<a class="job" href=${"#flow-" + id} data-flow=${id} onClick=${opening(openFlow, id)}>${id}</a>`;
export const WorkflowLink = ({ id }) => html`<a class="job" href=${"#workflow-" + id} data-workflow=${id} onClick=${opening(openWorkflow, id)}>${id}</a>`;
export const WorkerLink = ({ id }) => html`<a class="job" href=${"#worker-" + id} data-worker=${id} onClick=${opening(openWorker, id)}>${id}</a>`;

/** Bumped after an action on a job: the open job's page reads it again. */
export const jobsChanged = createStore(0);
