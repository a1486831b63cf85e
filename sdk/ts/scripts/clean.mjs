// Removes the build output, so that nothing an earlier build left stands in
// for this one's.
import { rmSync } from "node:fs";

rmSync(new URL("../dist", import.meta.url), { recursive: true, force: true });
