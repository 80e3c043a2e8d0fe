// What the Node test files share: their settings from the environment (set by CTest) and the
// packages they test, loaded from the project npm_setup.sh installed them into.
//   TESSERA_BIN_DIR       build/bin (tessera-scheduler, -worker, -frontend, -kvstore)
//   TESSERA_SHARED_DIR    the shared data (models/stories260K)
//   TESSERA_NODE_PROJECT  npm_setup.sh's project (tessera-client from the packed tarball, openai);
//                         unset: the source tree's clients/node (after `npm install` there)
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
export const BIN_DIR = process.env.TESSERA_BIN_DIR ?? path.join(here, "../../../build/bin");
export const SHARED = process.env.TESSERA_SHARED_DIR ?? path.join(here, "../../../../shared");
export const PROJECT = process.env.TESSERA_NODE_PROJECT ?? "";

/** Imports package `name` as installed in the test project (the source tree without one). */
export async function load(name) {
  if (!PROJECT && name === "tessera-client") return import(pathToFileURL(path.join(here, "../../../clients/node/index.js")).href);
  const req = createRequire(path.join(PROJECT || path.join(here, "../../../clients/node"), "package.json"));
  return import(pathToFileURL(req.resolve(name)).href);
}
