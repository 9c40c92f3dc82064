// The page's components are written with htm's tagged templates over Preact: plain JavaScript the
// browser runs as is, no build step (both served from the installed packages, see ../assets.ts).
import { h } from "preact";
import htm from "htm";

export const html = htm.bind(h);
