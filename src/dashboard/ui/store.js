// A value components read and any code can set: the open job or worker, the last action's
// answer, the question waiting for a confirmation. Components re-render when it changes.
import { useEffect, useState } from "preact/hooks";

export const createStore = (initial) => {
  let value = initial;
  const listeners = new Set();
  return {
    get: () => value,
    set: (next) => {
      value = typeof next === "function" ? next(value) : next;
      for (const listener of listeners) listener(value);
    },
    subscribe: (listener) => (listeners.add(listener), () => listeners.delete(listener)),
  };
};

export const useStore = (store) => {
  const [value, setValue] = useState(store.get());
  useEffect(() => store.subscribe(setValue), [store]);
  return value;
};
