#!/usr/bin/env bash
# Runs the own tests of the producers in other languages, on each package
# as a user installs it from its published archive: producers/python built
# into a wheel and an sdist (`python -m build`), each pip-installed into a
# fresh venv under target/producers/; producers/node packed (`npm pack`)
# and npm-installed into a fresh folder there. So a file the packages need
# but do not ship fails here.
# Each test file starts its own redis-server (REDIS_SERVER_BIN, else
# redis-server from PATH) on a free loopback port and kills it afterwards.
# Needs python3 with venv, node and npm; pip and npm fetch the packages'
# dependencies (build, setuptools, redis, ioredis). Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$root/target/producers
rm -rf "$work"
mkdir -p "$work/dist" "$work/node"

# `build` lives in its own venv, reused when present (like the Valkey venv).
builder=$root/target/producers-build
if [ ! -x "$builder/bin/pyproject-build" ]; then
    python3 -m venv "$builder"
    "$builder/bin/pip" install --quiet --disable-pip-version-check build
fi
echo "producers/python: the wheel and the sdist built"
"$builder/bin/python" -m build --outdir "$work/dist" producers/python >"$work/build.log" 2>&1 \
    || { cat "$work/build.log" >&2; exit 1; }
for archive in "$work"/dist/*.whl "$work"/dist/*.tar.gz; do
    name=$(basename "$archive")
    echo "producers/python: $name installed into a fresh venv, then its tests"
    venv=$work/venv-${name##*.}
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$archive"
    # From another folder, so that the tests import the installed package.
    (cd "$work" && "$venv/bin/python" -m unittest discover -s "$root/producers/python/tests" -v)
done

echo "producers/node: npm pack, the tarball installed into a fresh folder, then its tests"
tarball=$(cd producers/node && npm pack --silent --pack-destination "$work/dist")
(cd "$work/node" && echo '{"private": true}' >package.json \
    && npm install --silent --no-audit --no-fund "$work/dist/$tarball")
DELAYQUEUE_PRODUCER="$work/node/node_modules/delayqueue-producer" \
    node --test "$root/producers/node/test/"
