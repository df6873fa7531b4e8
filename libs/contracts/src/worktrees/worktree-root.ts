import { homedir } from 'node:os';
import { isAbsolute, join } from 'node:path';

/**
 * Where worktrees live on a host when GANTRY_WORKTREE_ROOT is not set — the one default the worktree
 * service (which makes them) and the runners (which refuse a leased path outside it) share: the user's
 * state directory (`$XDG_STATE_HOME`, else `~/.local/state`) + `gantry/worktrees`, never a directory
 * relative to where a process started. Inside a project checkout, an agent that outlived its worktree
 * would have its git commands act on that checkout (docs/worktrees.md, "Where worktrees live").
 */
export function defaultWorktreeRoot(env: Record<string, string | undefined> = process.env, home: string = homedir()): string {
  const state = env.XDG_STATE_HOME && isAbsolute(env.XDG_STATE_HOME) ? env.XDG_STATE_HOME : join(home, '.local', 'state');
  return join(state, 'gantry', 'worktrees');
}

/** GANTRY_WORKTREE_ROOT when set, else the default. */
export function worktreeRootOf(env: Record<string, string | undefined> = process.env): string {
  return env.GANTRY_WORKTREE_ROOT?.trim() || defaultWorktreeRoot(env);
}
