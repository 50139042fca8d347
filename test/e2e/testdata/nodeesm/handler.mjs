import { createHash } from 'node:crypto';
export async function handler(event) {
  return { module: 'esm', sha: createHash('sha256').update(String(event.text || '')).digest('hex').slice(0, 8) };
}
