import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ErrorCode } from '@gantry/contracts';
import { takeScratchFolder } from './scratch-ownership.js';

describe("a runner's scratch folder", () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'scratch-owner-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('is made private when it does not exist, and taken', async () => {
    await expect(takeScratchFolder(join(dir, 'new'), 'runner-1')).resolves.toBeUndefined();
  });

  it('is refused when others may write it (made beforehand under the predictable name), a link, or not a directory', async () => {
    const open = join(dir, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    await expect(takeScratchFolder(open, 'runner-1')).rejects.toMatchObject({ code: ErrorCode.PRECONDITION_FAILED, message: expect.stringMatching(/written by other users/) });
    const target = join(dir, 'target');
    mkdirSync(target, { mode: 0o700 });
    symlinkSync(target, join(dir, 'link'));
    await expect(takeScratchFolder(join(dir, 'link'), 'runner-1')).rejects.toMatchObject({ message: expect.stringMatching(/is not a directory/) });
  });

  // Only root can hand a folder to another user.
  (process.getuid?.() === 0 ? it : it.skip)('is refused when it belongs to another user', async () => {
    const theirs = join(dir, 'theirs');
    mkdirSync(theirs, { mode: 0o700 });
    chownSync(theirs, 65534, 65534);
    await expect(takeScratchFolder(theirs, 'runner-1')).rejects.toMatchObject({ message: expect.stringMatching(/belongs to user 65534/) });
  });
});
