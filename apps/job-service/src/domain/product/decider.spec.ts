import { ErrorCode, registerProduct, parseRequest, ProductViewSchema, type ProductSettings } from '@gantry/contracts';
import { DeciderSpecification } from '@gantry/eventstore/testing';
import { validatesAgainstContract } from '../testing/contract-events.js';
import type { ProductCommand } from './commands.js';
import { productDecider } from './decider.js';
import type { ProductEvent } from './events.js';
import type { Product } from './state.js';
import { productResolution, productView } from './view.js';

const given = DeciderSpecification.for(productDecider, { validate: validatesAgainstContract('jobs') });
const T0 = Date.parse('2026-11-30T05:00:00.000Z');
const at = (s: number) => new Date(T0 + s * 1000).toISOString();

const settings: ProductSettings = {
  repository: 'acme/shop',
  cloneUrl: 'https://github.com/acme/shop.git',
  targetBranch: 'main',
  prStrategy: 'STORY',
  mergeMethod: 'SQUASH',
  requiredChecks: ['ci/test'],
};
const registered: ProductEvent = { type: 'ProductRegistered', data: { productId: 'product-42', ...settings, registeredAt: at(0) } };
const register = (s = 0): ProductCommand => ({ type: 'RegisterProduct', data: { productId: 'product-42', settings, now: at(s) } });
const update = (changes: Partial<ProductSettings>, s: number): ProductCommand => ({ type: 'UpdateProduct', data: { productId: 'product-42', changes, now: at(s) } });

describe('product decider', () => {
  it('a product is registered with its repository, target branch and pull-request rules', () => {
    const product = given([]).when(register()).then([registered]) as Product;
    expect(product).toMatchObject({ status: 'REGISTERED', version: 1, settings });
    expect(productResolution(product)).toEqual({ repository: 'acme/shop', cloneUrl: 'https://github.com/acme/shop.git', targetBranch: 'main' });
  });

  it('a product registered twice is refused: the second registration is an update', () => {
    given([registered]).when(register(5)).thenThrows(ErrorCode.INVALID_TRANSITION, /already registered; change it with update_product/);
  });

  it('an update records every setting afterwards and names the ones it changed', () => {
    const product = given([registered]).when(update({ prStrategy: 'SPRINT', requiredChecks: ['ci/test'], targetBranch: 'develop' }, 10)).then([
      {
        type: 'ProductUpdated',
        data: { productId: 'product-42', ...settings, prStrategy: 'SPRINT', targetBranch: 'develop', changed: ['targetBranch', 'prStrategy'], updatedAt: at(10) },
      },
    ]) as Product;
    expect(product.version).toBe(2);
    expect(ProductViewSchema.parse(productView(product))).toMatchObject({ prStrategy: 'SPRINT', targetBranch: 'develop', registeredAt: at(0), updatedAt: at(10) });
  });

  it('an update that changes nothing records nothing', () => {
    given([registered]).when(update({ mergeMethod: 'SQUASH', requiredChecks: ['ci/test'] }, 10)).then([]);
  });

  it('an update of a product nobody registered is UNKNOWN_PRODUCT', () => {
    given([]).when(update({ mergeMethod: 'MERGE' }, 10)).thenThrows(ErrorCode.UNKNOWN_PRODUCT, /product-42 is not registered/);
  });

  it('the wire request carries the settings the decider records', () => {
    const request = parseRequest(registerProduct, registerProduct.examples.valid[0]);
    const { productId, idempotencyKey: _k, correlationId: _c, causationId: _z, actor: _a, ...fromWire } = request;
    given([]).when({ type: 'RegisterProduct', data: { productId, settings: fromWire, now: at(0) } }).then([registered]);
  });
});
