// Talking to the dashboard's routes: the token (sent with every request: actions need it, and
// reads too when the dashboard was started so), who is asking, and an action's round trip:
// confirmed in a dialog first, answered in words in the toast.
import { createStore } from "./store.js";

export const token = createStore(sessionStorage.getItem("picket-token") ?? "");
token.subscribe((value) => sessionStorage.setItem("picket-token", value));
export const askedBy = createStore(localStorage.getItem("picket-by") ?? "");
askedBy.subscribe((value) => localStorage.setItem("picket-by", value));

const authorization = () => (token.get() ? { authorization: "Bearer " + token.get() } : {});

/** GET a route: { ok, body } (the body is the route's JSON, an error's too). */
export const getJson = async (path) => {
  const response = await fetch(path, { headers: authorization() });
  return { ok: response.ok, body: await response.json() };
};

/** The last action's answer, shown at the bottom of the page (where it is seen wherever the button was). */
export const toast = createStore({ text: "", bad: false });
let toastTimer = null;
export const tell = (text, bad) => {
  toast.set({ text, bad });
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => toast.set({ text: "", bad: false }), 15000);
};

/** The question the confirmation dialog asks: { text, go, answer(yes) }, or null. */
export const question = createStore(null);
export const confirmed = (text, go) => new Promise((answer) => question.set({ text, go, answer }));

/** Asks, then POSTs the action (with `sent`, JSON text, when it takes a body) and tells its answer; true when the server did it. */
export const act = async (path, [text, go], sent) => {
  if (!(await confirmed(text, go))) return false;
  const headers = authorization();
  if (askedBy.get().trim()) headers["x-picket-by"] = encodeURIComponent(askedBy.get().trim());
  if (sent !== undefined) headers["content-type"] = "application/json";
  try {
    const response = await fetch(path, { method: "POST", headers, body: sent });
    const body = await response.json();
    tell(body.message ?? body.error, !response.ok);
    return response.ok;
  } catch (error) {
    tell("the dashboard did not answer: " + error.message + " (nothing is known to have changed; look again before retrying)", true);
    return false;
  }
};
