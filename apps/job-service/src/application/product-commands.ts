import { Controller, Inject } from '@nestjs/common';
import { getProduct, productStreamId, registerProduct, updateProduct, type ReplyOf, type RequestOf } from '@gantry/contracts';
import { EventStore, handleWithDecider, type Decision } from '@gantry/eventstore';
import type { CommandContext } from '@gantry/messaging';
import { CommandHandler } from '@gantry/service-runtime';
import { productDecider, productExists, productView, unknownProduct, type ProductEvent, type ProductState } from '../domain/index.js';
import { productRow } from '../infrastructure/job-store.js';
import { idempotencyFor, metadataOf } from './command-context.js';

function registered(decision: Decision<ProductState, ProductEvent>) {
  if (!productExists(decision.after)) throw new Error('a decided product command left no product');
  return decision.after;
}

/** Products: registered once, then updated; jobs and sprint runs are resolved against them when created. */
@Controller()
export class ProductCommandHandlers {
  constructor(@Inject(EventStore) private readonly store: EventStore) {}

  @CommandHandler(registerProduct)
  async register(request: RequestOf<typeof registerProduct>, context?: CommandContext): Promise<ReplyOf<typeof registerProduct>> {
    const { productId, idempotencyKey: _k, correlationId: _c, causationId: _z, actor: _a, ...settings } = request;
    const executed = await handleWithDecider(this.store, {
      decider: productDecider,
      streamId: productStreamId(productId),
      command: { type: 'RegisterProduct', data: { productId, settings, now: this.store.clock().toISOString() } },
      metadata: metadataOf(request, context),
      idempotency: idempotencyFor('register_product', request),
      reply: (d) => ({ productId, version: registered(d).version }),
    });
    return executed.result;
  }

  @CommandHandler(updateProduct)
  async update(request: RequestOf<typeof updateProduct>, context?: CommandContext): Promise<ReplyOf<typeof updateProduct>> {
    const executed = await handleWithDecider(this.store, {
      decider: productDecider,
      streamId: productStreamId(request.productId),
      command: { type: 'UpdateProduct', data: { productId: request.productId, changes: request.changes, now: this.store.clock().toISOString() } },
      metadata: metadataOf(request, context),
      idempotency: idempotencyFor('update_product', request),
      reply: (d) => {
        const product = registered(d);
        return { productId: product.productId, version: product.version, settings: product.settings };
      },
    });
    return executed.result;
  }

  @CommandHandler(getProduct)
  async get(request: RequestOf<typeof getProduct>): Promise<ReplyOf<typeof getProduct>> {
    const product = await productRow(this.store.pool, request.productId);
    if (!product) throw unknownProduct(request.productId);
    return productView(product);
  }
}
