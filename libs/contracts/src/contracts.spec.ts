import { z } from 'zod';
// The whole package index: importing it registers every context's contracts.
import * as contracts from './index.js';
import { contractProblems } from './conformance.js';

const { contractRegistry, commandContractKey, eventContractKey, Contexts } = contracts;
const commands = contractRegistry.commands();
const events = contractRegistry.events();

describe('every registered contract', () => {
  it('is registered at all: the package defines commands and events (an empty registry would make the checks below vacuous)', () => {
    expect(commands.length).toBeGreaterThan(0);
    expect(events.length).toBeGreaterThan(0);
  });

  it('belongs to one of the four contexts', () => {
    const contexts = new Set<string>(Contexts);
    expect([...commands, ...events].filter((c) => !contexts.has(c.context)).map((c) => c.context)).toEqual([]);
  });

  describe.each(commands.map((c) => [commandContractKey(c), c] as const))('command %s', (_key, contract) => {
    it('is named in snake_case and has zod request and reply schemas', () => {
      expect(contract.name).toMatch(/^[a-z][a-z0-9]*(_[a-z0-9]+)*$/);
      expect(contract.request).toBeInstanceOf(z.ZodType);
      expect(contract.reply).toBeInstanceOf(z.ZodType);
    });

    it('has valid and invalid examples; every valid one parses, every invalid one is refused', () => {
      expect(contract.examples.valid.length).toBeGreaterThan(0);
      expect(contract.examples.invalid.length).toBeGreaterThan(0);
      expect(contractProblems(contract)).toEqual([]);
    });
  });

  describe.each(events.map((e) => [eventContractKey(e), e] as const))('event %s', (_key, contract) => {
    it('is named in PascalCase with a schema version ≥ 1 and a zod data schema', () => {
      expect(contract.type).toMatch(/^[A-Z][a-z0-9]*([A-Z][a-z0-9]*)*$/);
      expect(Number.isInteger(contract.schemaVersion) && contract.schemaVersion >= 1).toBe(true);
      expect(contract.data).toBeInstanceOf(z.ZodType);
    });

    it('has valid and invalid examples; every valid one parses and reads back from JSON, every invalid one is refused', () => {
      expect(contract.examples.valid.length).toBeGreaterThan(0);
      expect(contract.examples.invalid.length).toBeGreaterThan(0);
      expect(contractProblems(contract)).toEqual([]);
    });
  });
});
