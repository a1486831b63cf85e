// `await using` (explicit resource management, TypeScript 5.2): Lease and
// Session end at the end of the block that holds them. A runtime without
// Symbol.asyncDispose (Node.js before 18.18 and 20.4, older browsers)
// gets the key that core-js's polyfill uses, Symbol.for("Symbol.asyncDispose");
// a polyfill that sets Symbol.asyncDispose must load before this package.

declare global {
  interface SymbolConstructor {
    /** The method that `await using` calls at the end of its block (also declared by lib esnext.disposable, and by @types/node). */
    readonly asyncDispose: unique symbol;
  }
}

/** Symbol.asyncDispose, or the registry's "Symbol.asyncDispose" where the runtime has none. */
export const asyncDispose: typeof Symbol.asyncDispose = ((Symbol as { asyncDispose?: symbol }).asyncDispose ??
  Symbol.for("Symbol.asyncDispose")) as typeof Symbol.asyncDispose;
