import { pathToFirst, RESERVED_KEY, reservedKeyPath } from './reserved-keys.js';

describe('reservedKeyPath', () => {
  it('names the path to an own __proto__ key, however deep, and nothing for a request without one', () => {
    const request = JSON.parse('{"a":[1,{"b":{"__proto__":{"x":1}}}],"constructor":1}') as unknown;
    expect(reservedKeyPath(request)).toEqual(['a', 1, 'b', RESERVED_KEY]);
    expect(reservedKeyPath({ a: [1, { b: { constructor: 1, prototype: 2 } }] })).toBeUndefined();
    expect(reservedKeyPath('__proto__')).toBeUndefined();
  });

  it('walks a request nested 100,000 deep without running out of stack', () => {
    const deep = JSON.parse(`${'['.repeat(100_000)}{"__proto__":1}${']'.repeat(100_000)}`) as unknown;
    expect(reservedKeyPath(deep)).toHaveLength(100_001);
  });
});

describe('pathToFirst', () => {
  it('gives the path of the value marked (a string here), and undefined when none is', () => {
    const hasNul = (item: unknown) => (typeof item === 'string' && item.includes('\u0000') ? [] : undefined);
    expect(pathToFirst({ plan: { steps: ['one', 'tw\u0000o'] } }, hasNul)).toEqual(['plan', 'steps', 1]);
    expect(pathToFirst('a\u0000', hasNul)).toEqual([]);
    expect(pathToFirst({ plan: { steps: ['one', 'two'] } }, hasNul)).toBeUndefined();
  });

  it('visits an object met twice once', () => {
    const shared = { x: 1 };
    const visits: unknown[] = [];
    pathToFirst({ a: shared, b: shared }, (item) => {
      visits.push(item);
      return undefined;
    });
    expect(visits.filter((item) => item === shared)).toHaveLength(1);
  });
});
