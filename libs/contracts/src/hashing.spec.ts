import { canonicalHash, canonicalJson, deriveIdempotencyKey } from './hashing.js';

describe('canonical hashing', () => {
  it('gives the same hash whatever the key order, at every depth', () => {
    const a = { job: { id: 'j-1', config: { model: 'm', budget: 6000 } }, kind: 'REVIEW', list: [{ x: 1, y: 2 }] };
    const b = { list: [{ y: 2, x: 1 }], kind: 'REVIEW', job: { config: { budget: 6000, model: 'm' }, id: 'j-1' } };
    expect(canonicalJson(a)).toBe(canonicalJson(b));
    expect(canonicalHash(a)).toBe(canonicalHash(b));
  });

  it('writes keys sorted, without whitespace', () => {
    expect(canonicalJson({ b: 1, a: { d: [3, 1], c: null } })).toBe('{"a":{"c":null,"d":[3,1]},"b":1}');
  });

  it('keeps the order of array elements', () => {
    expect(canonicalHash({ steps: ['a', 'b'] })).not.toBe(canonicalHash({ steps: ['b', 'a'] }));
  });

  it('drops fields whose value is undefined', () => {
    expect(canonicalHash({ a: 1, b: undefined, c: { d: undefined } })).toBe(canonicalHash({ a: 1, c: {} }));
  });

  it('keeps null distinct from an absent field', () => {
    expect(canonicalHash({ a: 1, b: null })).not.toBe(canonicalHash({ a: 1 }));
  });

  it('gives different values different hashes', () => {
    const values = [
      { a: 1 }, { a: '1' }, { a: 2 }, { b: 1 }, { a: [1] }, { a: { b: 1 } }, { a: true }, { a: null },
      [1, 2], [2, 1], '', 0, null, {}, [],
    ];
    const hashes = values.map(canonicalHash);
    expect(new Set(hashes).size).toBe(values.length);
  });

  it('hashes integer-like keys and a __proto__ key like any other key', () => {
    const withProto = JSON.parse('{"__proto__":{"admin":true}}') as unknown;
    expect(canonicalJson(withProto)).toBe('{"__proto__":{"admin":true}}');
    expect(canonicalHash(withProto)).not.toBe(canonicalHash({}));
    expect(canonicalJson({ 10: 'a', 2: 'b', x: 'c' })).toBe('{"10":"a","2":"b","x":"c"}');
  });

  it('hashes a Date as its ISO string', () => {
    expect(canonicalJson({ at: new Date('2026-01-02T03:04:05.000Z') })).toBe('{"at":"2026-01-02T03:04:05.000Z"}');
  });

  it('refuses values JSON cannot carry instead of colliding with another value', () => {
    expect(() => canonicalHash({ a: Number.NaN })).toThrow(/\$\.a/);
    expect(() => canonicalHash({ a: Infinity })).toThrow(TypeError);
    expect(() => canonicalHash({ a: 1n })).toThrow(TypeError);
    expect(() => canonicalHash({ a: new Map([['k', 1]]) })).toThrow(TypeError);
    expect(() => canonicalHash(undefined)).toThrow(TypeError);
  });

  it('refuses a value that contains itself, but hashes a value shared by two fields', () => {
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = { back: cyclic };
    expect(() => canonicalHash(cyclic)).toThrow(/\$\.self\.back: the value contains itself/);
    const shared = { x: 1 };
    expect(canonicalJson({ a: shared, b: [shared] })).toBe('{"a":{"x":1},"b":[{"x":1}]}');
  });

  it('calls toJSON once, as JSON.stringify does, so a toJSON returning its own object does not loop', () => {
    class Money {
      constructor(readonly cents: number) {}
      toJSON(): this {
        return this;
      }
    }
    expect(canonicalJson({ price: new Money(250) })).toBe('{"price":{"cents":250}}');
  });

  it('is a sha256 hex digest', () => {
    expect(canonicalHash({ a: 1 })).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe('deriveIdempotencyKey', () => {
  it('is stable for the same parts in any order and scoped by its scope', () => {
    const key = deriveIdempotencyKey('product-7:enqueue', { task: 't-1', step: 's-2' });
    expect(key).toBe(deriveIdempotencyKey('product-7:enqueue', { step: 's-2', task: 't-1' }));
    expect(key).toMatch(/^product-7:enqueue:[0-9a-f]{40}$/);
    expect(deriveIdempotencyKey('product-8:enqueue', { task: 't-1', step: 's-2' })).not.toBe(key);
    expect(deriveIdempotencyKey('product-7:enqueue', { task: 't-2', step: 's-2' })).not.toBe(key);
  });

  it('does not reveal the parts it was derived from', () => {
    expect(deriveIdempotencyKey('p', { email: 'someone@example.com' })).not.toContain('someone');
  });
});
