// A route read while something is open (a job's page, a worker's page), kept fresh.
import { useEffect, useState } from "preact/hooks";
import { getJson } from "./api.js";

/**
 * Reads `path` while `id` is set: at once, again whenever `reread` changes, and every second while
 * `follow`. The answer to an earlier id, arriving late, is dropped.
 */
export const useFollowed = (id, path, { follow = true, reread = 0 } = {}) => {
  const [answer, setAnswer] = useState(null);
  useEffect(() => {
    if (id === null) return setAnswer(null);
    let current = true;
    const read = () => getJson(path).then((a) => current && setAnswer({ id, ...a }));
    read();
    const timer = follow ? setInterval(read, 1000) : null;
    return () => ((current = false), clearInterval(timer));
  }, [id, path, follow, reread]);
  return answer?.id === id ? answer : null;
};
