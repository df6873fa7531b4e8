/**
 * Which pull requests a GitHub delivery concerns — nothing more is taken from it (PR-12): the pull
 * requests named are read from GitHub again before anything is decided. Handled: `pull_request`
 * (opened, reopened, synchronize, ready_for_review, closed — merged or not, edited, converted_to_draft,
 * auto_merge_enabled, auto_merge_disabled), `pull_request_review`,
 * `check_suite` (completed), `check_run` (created, rerequested, completed), `status`. Every other event or action is recorded and
 * ignored (null).
 */
export interface DeliveryConcerns {
  repository: string;
  branches: string[];
  headSha?: string;
  prNumber?: number;
}

const PULL_REQUEST_ACTIONS = new Set(['opened', 'reopened', 'synchronize', 'ready_for_review', 'closed', 'edited', 'converted_to_draft', 'auto_merge_enabled', 'auto_merge_disabled']);

/** A check run created (a re-run is a new run), asked to run again, or completed. */
const CHECK_RUN_ACTIONS = new Set(['created', 'rerequested', 'completed']);

type Json = Record<string, unknown>;
const obj = (v: unknown): Json => (v && typeof v === 'object' ? (v as Json) : {});
const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

/**
 * A PR number GitHub could have sent: a positive whole number that fits the `pr_number` column. Any
 * other (3000000000, 1.5) failed the look-up of the PRs a delivery names on every attempt, and with it
 * the read of the PRs its branch names; it is dropped, and the branch and head still name them.
 */
function prNumberOf(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isInteger(v) && v > 0 && v <= 2_147_483_647 ? v : undefined;
}

function headRefs(pulls: unknown): string[] {
  return Array.isArray(pulls) ? pulls.map((p) => str(obj(obj(p).head).ref)).filter((r): r is string => r !== undefined) : [];
}

export function whatADeliveryConcerns(event: string, payload: unknown): DeliveryConcerns | null {
  const p = obj(payload);
  const repository = str(obj(p.repository).full_name);
  if (!repository) return null;
  const action = str(p.action);
  switch (event) {
    case 'pull_request':
    case 'pull_request_review': {
      if (event === 'pull_request' && !PULL_REQUEST_ACTIONS.has(action ?? '')) return null;
      const pr = obj(p.pull_request);
      const head = obj(pr.head);
      const ref = str(head.ref);
      // A fork's branch is not one of ours, whatever its name.
      const headRepo = str(obj(head.repo).full_name);
      if (!ref || (headRepo !== undefined && headRepo !== repository)) return null;
      return { repository, branches: [ref], headSha: str(head.sha), prNumber: prNumberOf(pr.number) };
    }
    case 'check_suite': {
      if (action !== 'completed') return null;
      const suite = obj(p.check_suite);
      const branches = [str(suite.head_branch), ...headRefs(suite.pull_requests)].filter((b): b is string => b !== undefined);
      return { repository, branches: [...new Set(branches)], headSha: str(suite.head_sha) };
    }
    case 'check_run': {
      // `created`, `rerequested`: a check run again on a head maybe seen green — pending now, the head not green (PR-4).
      if (!CHECK_RUN_ACTIONS.has(action ?? '')) return null;
      const run = obj(p.check_run);
      const suite = obj(run.check_suite);
      const branches = [str(suite.head_branch), ...headRefs(run.pull_requests)].filter((b): b is string => b !== undefined);
      return { repository, branches: [...new Set(branches)], headSha: str(run.head_sha) ?? str(suite.head_sha) };
    }
    case 'status': {
      const branches = Array.isArray(p.branches) ? p.branches.map((b) => str(obj(b).name)).filter((b): b is string => b !== undefined) : [];
      return { repository, branches, headSha: str(p.sha) };
    }
    default:
      return null;
  }
}
