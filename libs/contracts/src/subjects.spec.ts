import { jobEventContracts } from './jobs/events.js';
import {
  commandQueueGroup,
  commandSubject,
  Contexts,
  defaultNaming,
  dispatchStreamName,
  dispatchSubject,
  eventBranch,
  eventFilter,
  eventFilterFor,
  eventStreamSubjects,
  eventSubject,
  eventSubjectPrefix,
  eventTypeOfSubject,
  isContext,
  isSubjectToken,
  streamName,
  type Naming,
} from './subjects.js';

describe('subject and stream names', () => {
  it('names event subjects gantry.<context>.evt.<type>.<stream-id>', () => {
    expect(eventSubject(defaultNaming, 'jobs', 'JobClaimed', 'job-42')).toBe('gantry.jobs.evt.JobClaimed.job-42');
  });

  it("names a job's story-log events on the log branch, gantry.jobs.log.<type>.<stream-id>, and the stream holds both branches", () => {
    expect(eventSubject(defaultNaming, 'jobs', 'CommitLogged', 'job-42')).toBe('gantry.jobs.log.CommitLogged.job-42');
    expect(eventSubject(defaultNaming, 'jobs', 'ImplementationLogged', 'job-42')).toBe('gantry.jobs.log.ImplementationLogged.job-42');
    expect(eventSubject(defaultNaming, 'jobs', 'TestResultLogged', 'job-42')).toBe('gantry.jobs.log.TestResultLogged.job-42');
    expect(eventFilter(defaultNaming, 'jobs', 'TestResultLogged')).toBe('gantry.jobs.log.TestResultLogged.>');
    expect(eventStreamSubjects(defaultNaming, 'jobs')).toEqual(['gantry.jobs.evt.>', 'gantry.jobs.log.>']);
    expect(eventStreamSubjects(defaultNaming, 'prs')).toEqual(['gantry.prs.evt.>']);
    // Every type on the log branch is a job event: a renamed type would otherwise fall back to evt unnoticed.
    const logTypes = jobEventContracts.map((c) => c.type).filter((type) => eventBranch('jobs', type) === 'log');
    expect(logTypes.sort()).toEqual(['CommitLogged', 'ImplementationLogged', 'TestResultLogged']);
  });

  it('gives a durable consumer of some types the one filter subject that covers them: their branch, or the whole stream', () => {
    expect(eventFilterFor(defaultNaming, 'jobs', ['JobEnqueued', 'JobFinished'])).toBe('gantry.jobs.evt.>');
    expect(eventFilterFor(defaultNaming, 'jobs', ['JobEnqueued'])).toBe('gantry.jobs.evt.>');
    expect(eventFilterFor(defaultNaming, 'jobs', ['CommitLogged', 'TestResultLogged'])).toBe('gantry.jobs.log.>');
    expect(eventFilterFor(defaultNaming, 'jobs', ['JobFinished', 'CommitLogged'])).toBe('');
    expect(eventFilterFor(defaultNaming, 'jobs', null)).toBe('');
    expect(eventFilterFor(defaultNaming, 'prs', null)).toBe('gantry.prs.evt.>');
  });

  it("reads an event subject's type back, and nothing from a subject that is not one of the context's events", () => {
    const test: Naming = { subjectRoot: 't_ab12.gantry', streamPrefix: 'T_AB12_' };
    const prefix = eventSubjectPrefix(test, 'jobs');
    expect(eventTypeOfSubject(prefix, eventSubject(test, 'jobs', 'JobClaimed', 'job-42'))).toBe('JobClaimed');
    expect(eventTypeOfSubject(prefix, eventSubject(test, 'jobs', 'CommitLogged', 'job-42'))).toBe('CommitLogged');
    expect(eventTypeOfSubject(prefix, eventSubject(test, 'prs', 'JobClaimed', 'job-42'))).toBeNull();
    expect(eventTypeOfSubject(prefix, eventSubject(defaultNaming, 'jobs', 'JobClaimed', 'job-42'))).toBeNull();
    expect(eventTypeOfSubject(prefix, 't_ab12.gantry.jobs.evt.JobClaimed')).toBeNull();
    expect(eventTypeOfSubject(prefix, 't_ab12.gantry.jobs.evt..job-42')).toBeNull();
    expect(eventTypeOfSubject(prefix, 't_ab12.gantry.jobs.cmd.claim_job')).toBeNull();
  });

  it('filters the events of a context (its evt branch), or of one type', () => {
    expect(eventFilter(defaultNaming, 'prs')).toBe('gantry.prs.evt.>');
    expect(eventFilter(defaultNaming, 'prs', 'PullRequestOpened')).toBe('gantry.prs.evt.PullRequestOpened.>');
  });

  it('names command subjects gantry.<context>.cmd.<name> with one queue group per context', () => {
    expect(commandSubject(defaultNaming, 'worktrees', 'acquire_lease')).toBe('gantry.worktrees.cmd.acquire_lease');
    expect(commandQueueGroup(defaultNaming, 'worktrees')).toBe('gantry.worktrees.cmd');
  });

  it('names one stream per context and a dispatch stream', () => {
    expect(Contexts.map((c) => streamName(defaultNaming, c))).toEqual([
      'GANTRY_JOBS',
      'GANTRY_WORKFLOW',
      'GANTRY_PRS',
      'GANTRY_WORKTREES',
    ]);
    expect(dispatchStreamName(defaultNaming)).toBe('GANTRY_DISPATCH');
    expect(dispatchSubject(defaultNaming, 'REVIEW')).toBe('gantry.dispatch.REVIEW');
  });

  it('uses the configured root and prefix, so installations sharing one NATS do not meet', () => {
    const test: Naming = { subjectRoot: 't_ab12.gantry', streamPrefix: 'T_AB12_' };
    expect(eventSubject(test, 'jobs', 'JobQueued', 'j-1')).toBe('t_ab12.gantry.jobs.evt.JobQueued.j-1');
    expect(commandSubject(test, 'jobs', 'claim_job')).toBe('t_ab12.gantry.jobs.cmd.claim_job');
    expect(streamName(test, 'jobs')).toBe('T_AB12_JOBS');
    expect(dispatchStreamName(test)).toBe('T_AB12_DISPATCH');
  });

  it('refuses a stream id, type, command name or job kind that would split or widen the subject', () => {
    expect(() => eventSubject(defaultNaming, 'jobs', 'JobClaimed', 'a.b')).toThrow(/stream id "a\.b"/);
    expect(() => eventSubject(defaultNaming, 'jobs', 'JobClaimed', '')).toThrow(RangeError);
    expect(() => eventSubject(defaultNaming, 'jobs', 'Job*', 'j-1')).toThrow(/event type/);
    expect(() => eventFilter(defaultNaming, 'jobs', '>')).toThrow(RangeError);
    expect(() => commandSubject(defaultNaming, 'jobs', 'claim job')).toThrow(/command name/);
    expect(() => dispatchSubject(defaultNaming, 'A.B')).toThrow(/job kind/);
  });

  it('refuses a subject root with wildcards or empty tokens and a stream prefix that cannot name a stream', () => {
    expect(() => commandSubject({ ...defaultNaming, subjectRoot: 'gantry.*' }, 'jobs', 'x')).toThrow(/subject root/);
    expect(() => commandSubject({ ...defaultNaming, subjectRoot: 'a..b' }, 'jobs', 'x')).toThrow(/subject root/);
    expect(() => commandSubject({ ...defaultNaming, subjectRoot: '' }, 'jobs', 'x')).toThrow(/subject root/);
    expect(() => streamName({ ...defaultNaming, streamPrefix: 'A.B_' }, 'jobs')).toThrow(/stream name/);
    expect(() => streamName({ ...defaultNaming, streamPrefix: 'a/b' }, 'jobs')).toThrow(/stream name/);
  });
});

describe('isSubjectToken', () => {
  it.each(['job-1', 'JobClaimed', 'a_b', 'ü', '0196d1e2-7c1a-7000-8000-000000000000'])('accepts %j', (token) => {
    expect(isSubjectToken(token)).toBe(true);
  });

  it.each(['', 'a.b', '.', '*', 'a*', '>', 'a>', ' ', 'a b', 'a\tb', 'a\nb', 'a\u0000b', '\u00a0'])('refuses %j', (token) => {
    expect(isSubjectToken(token)).toBe(false);
  });
});

describe('isContext', () => {
  it('knows exactly the four contexts', () => {
    expect(Contexts.every(isContext)).toBe(true);
    expect(isContext('system')).toBe(false);
    expect(isContext('Jobs')).toBe(false);
  });
});
