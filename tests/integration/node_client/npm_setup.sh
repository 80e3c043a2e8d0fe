#!/bin/sh
# CTest fixture of the Node client tests: `npm pack clients/node`, then install the tarball into
# a fresh project outside the source tree together with the test-only packages (the official
# `openai` client, `typescript`), from the npm registry (npm's cache: ~/.npm). Proves that the
# packed tarball installs and imports, and that its TypeScript declarations type-check a
# program. The tests then load tessera-client and openai from WORK/project/node_modules.
# usage: npm_setup.sh SOURCE_DIR WORK_DIR     (exit 77 = skipped: npm not installed)
set -eu
src="$1/clients/node"; work="$2"; here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "SKIPPED: node/npm not installed (Debian: apt-get install nodejs npm); Node client tests skipped"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work/project"
npm_q="--no-audit --no-fund --prefer-offline --loglevel=error"
tarball="$(cd "$work" && npm pack $npm_q --pack-destination "$work" "$src" | tail -n 1)"
echo "packed $tarball"
cd "$work/project"
printf '{"name": "tessera-node-conformance", "private": true, "type": "module"}\n' > package.json
npm install $npm_q "$work/$tarball" openai@^6.30.0 typescript@~5.9.0
# The installed copy imports from the project (not from the source tree).
node --input-type=module -e '
import * as tc from "tessera-client";
import { createRequire } from "node:module";
const where = createRequire(process.cwd() + "/").resolve("tessera-client");
if (!where.startsWith(process.cwd() + "/node_modules/")) throw new Error("tessera-client resolved to " + where);
console.log("installed tessera-client", tc.VERSION, "at", where);'
# The declarations type-check a program using every part of the API (strict mode).
cp "$here/typecheck.ts" .
# (no @types/node needed: the declarations use only lib.dom's AbortSignal)
./node_modules/.bin/tsc --noEmit --strict --target es2022 --lib es2022,dom --module nodenext \
  --moduleResolution nodenext typecheck.ts
echo "typecheck.ts type-checks against index.d.ts"
