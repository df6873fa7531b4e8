import { StringDecoder } from 'node:string_decoder';

/** Keeps the last `limit` bytes of a stream: the agent may print without bound, the runner may not keep it. */
export class BoundedTail {
  private chunks: Buffer[] = [];
  private size = 0;
  private dropped = 0;

  constructor(private readonly limit: number) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.size > this.limit && this.chunks.length > 0) {
      const excess = this.size - this.limit;
      const first = this.chunks[0]!;
      if (first.length <= excess) {
        this.chunks.shift();
        this.size -= first.length;
        this.dropped += first.length;
      } else {
        this.chunks[0] = first.subarray(excess);
        this.size -= excess;
        this.dropped += excess;
      }
    }
  }

  /** Bytes that no longer fit and were dropped from the front. */
  get droppedBytes(): number {
    return this.dropped;
  }

  toString(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

/**
 * Tests a pattern against one stream as it passes, across chunk boundaries, so a match is found even
 * when the matching text has long left the bounded tail. A character whose bytes two chunks split is
 * decoded whole.
 */
export class StreamMatcher {
  private carry = '';
  private found = false;
  private readonly decoder = new StringDecoder('utf8');
  private readonly pattern: RegExp;

  constructor(
    pattern: RegExp,
    private readonly overlap = 1024,
  ) {
    // A global or sticky pattern keeps state between tests; this one must not.
    this.pattern = new RegExp(pattern.source, pattern.flags.replace(/[gy]/g, ''));
  }

  push(chunk: Buffer): void {
    if (this.found) return;
    const text = this.carry + this.decoder.write(chunk);
    if (this.pattern.test(text)) this.found = true;
    this.carry = text.slice(-this.overlap);
  }

  get matched(): boolean {
    return this.found;
  }
}
