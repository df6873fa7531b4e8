/*
 * How large a pull request's events and answers may be (docs/pr-service.md, "How large its events
 * and answers may be"). What GitHub shows a PR with — the files in conflict, the checks of a head and
 * their names — has no bound that fits one NATS message (max_payload, 1 MiB by default); the events
 * the pr-service records and `get_pull_request` keep the first of each list, as many as fit a budget
 * as JSON, and count the rest.
 */

/** A list an event or the view keeps (the conflicting files, the checks of a head), as JSON. */
export const MAX_PR_LIST_BYTES = 64 * 1024;

/** A check's name as an event keeps it: the first characters, and an ellipsis for the rest. */
export const MAX_PR_CHECK_NAME_CHARS = 1000;

/** A check's details URL as an event keeps it: a longer one is not kept (null), since a URL cut is no URL. */
export const MAX_PR_DETAILS_URL_CHARS = 2000;

/** GitHub's words (a refusal's or a failure's message) as an event keeps them: GitHub bounds none of its messages. */
export const MAX_PR_MESSAGE_CHARS = 2000;

/** A message as an event keeps it (MAX_PR_MESSAGE_CHARS): its first characters, never splitting a surrogate pair. */
export function messageKept(message: string): string {
  return firstChars(message, MAX_PR_MESSAGE_CHARS);
}

/** A check name as an event keeps it (MAX_PR_CHECK_NAME_CHARS), never splitting a surrogate pair. */
export function checkNameKept(name: string): string {
  return name.length <= MAX_PR_CHECK_NAME_CHARS ? name : `${firstChars(name, MAX_PR_CHECK_NAME_CHARS)}…`;
}

/** The first `max` UTF-16 units of `text`, one fewer where the last would be half of a surrogate pair. */
function firstChars(text: string, max: number): string {
  if (text.length <= max) return text;
  const last = text.charCodeAt(max - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max);
}

/** The failed checks an event names, and the count of those it left out: "ci/a, ci/b and 3 more checks". */
export function failedChecksNamed(names: readonly string[], leftOut = 0): string {
  return leftOut > 0 ? `${names.join(', ')} and ${leftOut} more checks` : names.join(', ');
}
