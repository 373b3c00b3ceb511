// What the page shows of text it did not write: a task's id, name, error, result or
// progress message, a queue's, worker's or schedule's name.

// Characters that, shown as they are, make the page show other text than Redis holds,
// so each is shown as a visible mark, as the CLI escapes them (taskq.terminal.CONTROL):
// Unicode's bidirectional controls (the Arabic letter mark, the LTR and RTL marks,
// embeddings, overrides and isolates: "report\u202Efdp.exe" reads as "reportexe.pdf",
// and one left open reorders the text after it in the same line); control characters
// but tab and newline (a NUL shows as nothing, so "key\0" reads as "key", and a carriage
// return splits one value over two lines); and the line and paragraph separators.
const CONTROLS = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F\u061C\u200E\u200F\u2028-\u202E\u2066-\u2069]/g;

const codePoint = (c) => `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}`;

// `text` as the page shows it: every such character in it as a mark, `[U+202E]`.
export const shown = (text) => String(text).replace(CONTROLS, (c) => `[${codePoint(c)}]`);
