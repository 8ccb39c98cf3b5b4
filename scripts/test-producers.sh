#!/usr/bin/env bash
# Runs the own tests of the producers in other languages, on each package
# as a user installs it: producers/python with pip into a fresh venv under
# target/producers/, producers/node with npm into a fresh folder there.
# Each test file starts its own redis-server (REDIS_SERVER_BIN, else
# redis-server from PATH) on a free loopback port and kills it afterwards.
# Needs python3 with venv, node and npm; pip and npm fetch the packages'
# dependencies (setuptools, redis, ioredis). Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$root/target/producers
rm -rf "$work"
mkdir -p "$work/node"

echo "producers/python: pip install, then its tests"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check ./producers/python
# From another folder, so that the tests import the installed package.
(cd "$work" && "$work/venv/bin/python" -m unittest discover -s "$root/producers/python/tests" -v)

echo "producers/node: npm install, then its tests"
# --install-links: a copy, as from a registry, rather than a link to the folder.
(cd "$work/node" && echo '{"private": true}' >package.json \
    && npm install --silent --no-audit --no-fund --install-links "$root/producers/node")
DELAYQUEUE_PRODUCER="$work/node/node_modules/delayqueue-producer" \
    node --test "$root/producers/node/test/"
