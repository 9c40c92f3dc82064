// What the page says: each action's question before it is done, and how times read.
export const ASK = {
  retry: (id) => ["Retry job " + id + "? It runs again with a fresh set of attempts; its history is kept.", "retry"],
  cancel: (id) => ["Cancel job " + id + "? A pending job never runs; a running one's handler is told to stop.", "cancel the job"],
  "run-now": (id) => ["Run job " + id + " now? It becomes due at once, ahead of its run time.", "run now"],
  delete: (id) => ["Delete job " + id + " and its recorded steps? This cannot be undone.", "delete"],
  pause: (kind, name) => ["Pause " + kind + " " + name + "? No worker claims its jobs until it is resumed; running jobs finish.", "pause"],
  resume: (kind, name) => ["Resume " + kind + " " + name + "? Workers claim its jobs again at once.", "resume"],
  "schedule-pause": (name) => ["Pause schedule " + name + "? It fires no tick until resumed; the ticks meanwhile are skipped.", "pause"],
  "schedule-resume": (name) => ["Resume schedule " + name + "? It fires from its next tick.", "resume"],
  "flow-cancel": (id) => ["Cancel flow " + id + "? Every live job of it is cancelled, running ones told to stop, and what depends on them with them.", "cancel the flow"],
  "workflow-cancel": (id) => ["Cancel workflow " + id + "? Nothing more is applied to it: its inbox and timers are dropped, and its tasks in flight cancelled (running ones told to stop).", "cancel the workflow"],
  "workflow-send": (id, event) => ["Send " + event + " to workflow " + id + "? A worker applies it after the events already in its inbox; a state that does not take it records it as dropped.", "send the event"],
  "schedule-trigger": (name) => ["Trigger schedule " + name + " now? One job is made at once, as a tick would make it.", "trigger now"],
};

/** Which actions a job's page offers, by its status: what the server would refuse is not shown. */
export const JOB_ACTIONS = [
  { action: "retry", label: "retry", when: ["dead"] },
  { action: "run-now", label: "run now", when: ["pending"] },
  { action: "cancel", label: "cancel", when: ["pending", "processing", "waiting"] },
  { action: "delete", label: "delete", when: ["completed", "dead", "cancelled"] },
];

/** How long ago an ISO time was, for a person: "42 s", "3 min", "2 h". */
export const waited = (at) => {
  const s = Math.max(0, (Date.now() - new Date(at).getTime()) / 1000);
  return s < 120 ? Math.round(s) + " s" : s < 7200 ? Math.round(s / 60) + " min" : Math.round(s / 3600) + " h";
};

export const localTime = (at) => new Date(at).toLocaleString();
