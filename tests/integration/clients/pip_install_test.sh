#!/bin/sh
# `pip install clients/python` offline, as a user on Debian would: a venv that sees the system's
# python3-zmq/python3-msgpack (the dependencies) and python3-setuptools (the build backend), no
# package index; then the installed copy imports from the venv.
# usage: pip_install_test.sh PYTHON3 SOURCE_DIR WORK_DIR
set -eu
py="$1"; src="$2/clients/python"; work="$3"
rm -rf "$work" && mkdir -p "$work"
cp -r "$src" "$work/src"   # pip builds in the tree: keep the source tree clean
"$py" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --no-index --no-build-isolation "$work/src"
cd / && "$work/venv/bin/python" -c '
import sys, tessera_client
assert tessera_client.__file__.startswith(sys.argv[1]), tessera_client.__file__
assert tessera_client.AdminClient.__module__ == "tessera_client.admin"
print("installed tessera_client", tessera_client.__version__)' "$work/venv"
