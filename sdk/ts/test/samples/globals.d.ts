// What the samples of docs/SDK_TS.md take from the application around
// them, declared for the typecheck (scripts/check-types.mjs). At run time
// (test/docs.test.mjs) stubs.mjs stands in for each.

declare const client: import("@lockapi/client").Client;
declare const chunks: string[];
declare const batches: number[];
declare const report: string;
declare function upload(data: string, opts: { signal?: AbortSignal; fencingToken: number }): Promise<void>;
declare function deploy(opts: { fencingToken: number; signal?: AbortSignal }): Promise<void>;
declare function work(batch: number, opts: { signal?: AbortSignal; fencingToken: number }): Promise<void>;

// Node.js's, as far as the samples use it (the typecheck loads no
// @types/node; console comes with lib DOM).
declare const process: { env: Record<string, string | undefined> };

// node-postgres, as far as the fenced-write sample uses it.
declare module "pg" {
  interface PoolClient {
    query(sql: string, params?: unknown[]): Promise<unknown>;
    release(): void;
  }
  class Pool {
    constructor(opts: { connectionString?: string | undefined });
    connect(): Promise<PoolClient>;
  }
  const pg: { Pool: typeof Pool };
  export default pg;
}
