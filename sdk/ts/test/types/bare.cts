// Typechecked by scripts/check-types.mjs as a CommonJS consumer sees the
// package: lib ES2022 and DOM only (no esnext.disposable), no
// skipLibCheck, so that every declaration file must stand on its own.

import * as lockapi from "@lockapi/client";

export const client: lockapi.Client = new lockapi.Client("http://localhost:8080");
export const guard: (e: unknown) => boolean = lockapi.isLockHeldError;
