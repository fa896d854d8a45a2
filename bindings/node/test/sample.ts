// Type-checked by test/types.test.js with tsc --strict: how a user writes it.
import { Harness, ErrorCode, type Report, type Tool } from '..';

const add: Tool<{ a: number; b: number }, { sum: number }> = {
  description: 'Adds two numbers',
  parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } } },
  execute: async ({ a, b }, { signal }) => {
    signal.throwIfAborted();
    return { sum: a + b };
  },
  needsApproval: (args) => args.a > 100,
};

async function main(): Promise<number> {
  const h = new Harness({ tools: { add }, limits: { timeoutMs: 5000 }, approvals: async (r) => r.tool === 'add', keepWarmMs: 20 });
  const ac = new AbortController();
  const r: Report = await h.run('return 1 + 1', { signal: ac.signal, context: { turnId: 't' }, timeoutMs: 1000 });
  if (!r.ok && r.error?.code === ErrorCode.ScriptTimeoutError) return -1;
  const problem = await h.check('return 1');
  const d: string = h.typescript();
  const items = await h.respond('<tool-calls>\nreturn 1\n</tool-calls>', { format: 'chat' });
  h.close();
  return (problem === null ? 1 : 0) + d.length + items.length;
}

void main();
