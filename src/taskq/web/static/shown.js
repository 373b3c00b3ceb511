// What the page shows of text it did not write: a task's id, name, error, result or
// progress message, a queue's, worker's or schedule's name.

// Unicode's bidirectional controls (the Arabic letter mark, the LTR and RTL marks,
// embeddings, overrides and isolates). Hidden, they make the page show text other than
// what Redis holds ("report\u202Efdp.exe" reads as "reportexe.pdf"), and one left open
// reorders the text after it in the same line; so each is shown as a visible mark.
const BIDI_CONTROLS = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;

const codePoint = (c) => `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}`;

// `text` as the page shows it: every bidirectional control in it as `[U+202E]`.
export const shown = (text) => String(text).replace(BIDI_CONTROLS, (c) => `[${codePoint(c)}]`);
