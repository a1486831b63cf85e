// A stand-in for node-postgres in the fenced-write sample of
// docs/SDK_TS.md: it records the queries in place of a database. The
// guard's SQL itself is tested against PostgreSQL by the Go suite (fence/).

/** Every query sent, in order: { sql, params }. */
export const queries = [];

class PoolClient {
  async query(sql, params) {
    queries.push({ sql, params });
    return { rows: [] };
  }

  release() {
    queries.push({ sql: "(released)" });
  }
}

class Pool {
  constructor(opts) {
    this.opts = opts;
  }

  async connect() {
    return new PoolClient();
  }
}

export default { Pool };
